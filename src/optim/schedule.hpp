// The seed's per-step optimizer schedules: learning-rate cooldown and Muon momentum warm-up
// (the attention window's is train/attention_window.hpp). Each evaluates the seed's Python
// expression in double, so the values (and especially the boundaries: the step where cooldown
// starts) are the reference's exactly.
#pragma once

#include <cstdint>

#include "optim/muon.hpp"

namespace nanogpt {

// The seed's get_lr: with x = step/total, 1 while x < 1 − cooldown_frac, then falling
// linearly to 0.1 at step == total. Multiplies every optimizer's base learning rate.
// Requires 0 <= step <= total, total > 0 and cooldown_frac in [0, 1] (0: no cooldown).
double lr_multiplier(int64_t step, int64_t total, double cooldown_frac);

// Muon's momentum: momentum_start at step 0, rising linearly to momentum_end at
// momentum_warmup_steps and staying there. Low early momentum lets the first, large and
// quickly changing gradients through instead of averaging them into a stale direction.
double muon_momentum(int64_t step, const MuonConfig& config);

}  // namespace nanogpt
