// One training step as `train` and `bench train` run it: the global batch cut into sequences
// of train_seq_len, forward and backward over each, then the optimizer; and what it costs in
// FLOPs.
#pragma once

#include <cstdint>

#include "config/config.hpp"
#include "model/flop_count.hpp"

namespace nanogpt {

// One training step: tokens_per_step / train_seq_len sequences forward and backward
// (sequence_flops), then the optimizer's Newton–Schulz (muon_newton_schulz_flops).
FlopCount train_step_flops(const Config& config, int64_t window_blocks);

}  // namespace nanogpt
