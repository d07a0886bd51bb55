// One training step as `train` and `bench train` run it: the global batch cut into sequences
// of train_seq_len, forward and backward over each, then the optimizer; and what it costs in
// FLOPs.
#pragma once

#include <cstdint>
#include <span>

#include "config/config.hpp"
#include "model/flop_count.hpp"
#include "model/gpt.hpp"
#include "optim/gpt_optimizer.hpp"

namespace nanogpt {

// One optimisation step, shared by `train` and `bench train`. The global batch of
// tokens_per_step tokens is split among `replicas` groups of ranks (DiLoCo; 1 for
// data-parallel training), each group trained by its optimizer's ranks; this rank's part
// (inputs and targets of tokens_per_step / (replicas · N) tokens, N the optimizer's ranks) is
// cut into sequences of train_seq_len, each runs forward and backward with gradients
// accumulated for the mean loss over the group's batch (the last pass sends them to the
// group's other ranks as its backward finishes them), then the optimizer takes step `step`
// (0-based) of config.num_iterations. Returns the group's mean loss; throws Error naming the
// first non-finite tensor if it is not finite (the optimizer has not run then).
double run_train_step(Gpt& model, GptOptimizer& optimizer, std::span<const int32_t> inputs,
                      std::span<const int32_t> targets, int64_t step, int64_t window_blocks,
                      int replicas = 1);

// One training step: tokens_per_step / train_seq_len sequences forward and backward
// (sequence_flops), then the optimizer's Newton–Schulz (muon_newton_schulz_flops).
FlopCount train_step_flops(const Config& config, int64_t window_blocks);

}  // namespace nanogpt
