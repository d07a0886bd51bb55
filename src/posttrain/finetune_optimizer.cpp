#include "posttrain/finetune_optimizer.hpp"

#include <cmath>

#include "runtime/error.hpp"

namespace nanogpt {

Config finetune_optimizer_config(const Config& checkpoint_config, double lr_scale,
                                 double cooldown_frac, int64_t steps) {
  if (!(lr_scale > 0) || !std::isfinite(lr_scale)) {
    throw InputError("--lr-scale must be > 0: a fraction of the pre-training learning rates");
  }
  if (!(cooldown_frac >= 0 && cooldown_frac <= 1)) {
    throw InputError("--cooldown must be in [0, 1]");
  }
  Config oc = checkpoint_config;
  oc.num_iterations = steps;
  oc.cooldown_frac = cooldown_frac;
  oc.muon_lr *= lr_scale;
  oc.adam_matrix_lr *= lr_scale;
  oc.adam_head_lr *= lr_scale;
  oc.adam_embed_lr *= lr_scale;
  oc.adam_scalar_lr *= lr_scale;
  oc.muon_momentum_start = oc.muon_momentum_end;
  return oc;
}

}  // namespace nanogpt
