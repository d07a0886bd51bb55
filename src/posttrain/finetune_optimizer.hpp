// The optimizer configuration of a post-training stage: the checkpoint's own (Muon for the block
// matrices, Adam for the rest), every learning rate scaled by lr_scale, the LR schedule stretched
// over the stage's steps, and Muon's momentum at its end value from the first step (the
// momentum buffers come warm from the checkpoint the stage starts from).
#pragma once

#include <cstdint>

#include "config/config.hpp"

namespace nanogpt {

// InputError if lr_scale is not > 0 or cooldown_frac not in [0, 1], naming the option.
Config finetune_optimizer_config(const Config& checkpoint_config, double lr_scale,
                                 double cooldown_frac, int64_t steps);

}  // namespace nanogpt
