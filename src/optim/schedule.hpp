// The seed's per-step schedules: learning-rate cooldown, Muon momentum warm-up and the
// attention window warm-up. Each evaluates the seed's Python expression in double, so the
// values (and especially the boundaries: the step where cooldown starts, the steps where the
// window grows) are the reference's exactly.
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

// The seed's get_window_size_blocks: the sliding attention window, in blocks of `block`
// tokens, grows linearly from 1 block at step 0 to max_window_tokens (rounded up to a whole
// block) at step == total. Short windows early are cheaper and the model first needs only
// local context anyway. Requires 0 <= step <= total, total > 0, max_window_tokens >= 0,
// block > 0.
int64_t window_blocks(int64_t step, int64_t total, int64_t max_window_tokens = 1728,
                      int64_t block = 128);

}  // namespace nanogpt
