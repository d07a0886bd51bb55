// PPO's value loss (issue 18, item 6): the value head V_t regressed onto the returns R_t that
// gae_advantages computed, per counted token
//   ℓ_t = ½·(V_t − R_t)²,                                      dℓ/dV = V_t − R_t
// or, with value_clip = ε_v > 0 (PPO2's value clipping, TRL's cliprange_value), around the values
// V_old the returns were computed with:
//   V_clip = V_old + clip(V_t − V_old, −ε_v, ε_v)
//   ℓ_t = ½·max((V_t − R_t)², (V_clip − R_t)²)
//   dℓ/dV = V_t − R_t where the unclipped term is the larger (or they tie), else 0: the clipped
//   term is then the larger, so V_t left the ε_v band and V_clip is a constant.
// Aggregated like the policy loss (loss_aggregation.hpp): L = Σ_s w_s Σ_{t∈s counted} ℓ_t.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "posttrain/loss_aggregation.hpp"

namespace nanogpt {

struct ValueLossConfig {
  double value_clip = 0.0;  // ε_v, >= 0; 0 = no clipping
  // token_mean by default: PPO implementations (TRL's masked_mean) average over tokens.
  AggregationConfig aggregation{LossAggregation::kTokenMean, 0};
};

// One entry per token of the layout in every span.
struct ValueTokens {
  SequenceLayout layout;
  std::span<const double> values;      // V_t (what L differentiates)
  std::span<const double> old_values;  // V_old; may be empty when value_clip is 0
  std::span<const double> returns;     // R_t
};

struct ValueLossResult {
  double loss = 0;                  // L
  std::vector<double> grad_values;  // dL/dV_t, 0 at tokens not counted
  double clip_fraction = 0;         // counted tokens where the clipped term is strictly the larger
  int64_t tokens = 0;               // counted tokens
};

// As policy_loss: `whole` are the counts of the whole batch this is a part of.
ValueLossResult value_loss(const ValueTokens& batch, const ValueLossConfig& config,
                           const LossNormalizers& whole);
ValueLossResult value_loss(const ValueTokens& batch, const ValueLossConfig& config);

}  // namespace nanogpt
