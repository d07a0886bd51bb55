// The policy-gradient loss of RL post-training (issue 18, item 6): one core for REINFORCE, PPO,
// GRPO and its variants, on per-token log-probabilities. The model gives, for every token t of a
// sampled completion, logp_t = log softmax(logits/τ)[target_t] (τ the sampling temperature); this
// computes L and dL/dlogp_t, which the model turns into a weighted cross-entropy backward.
//
// Per counted token, with A_t its advantage (advantages.hpp), lp, lp_old, lp_ref the token's
// log-probability under the policy being trained, the policy that sampled it, the reference:
//   clipped    ρ_t = exp(lp − lp_old)                               (PPO, GRPO, DAPO, Dr. GRPO)
//              ℓ_t = −min(ρ_t·A_t, clip(ρ_t, 1 − ε_low, 1 + ε_high)·A_t)
//              dℓ/dlp = −A_t·ρ_t, or 0 where the clip is active: ρ_t > 1 + ε_high with A_t > 0,
//              or ρ_t < 1 − ε_low with A_t < 0 (the step already went far enough that way).
//              ε_low = ε_high = 0.2 is PPO's; DAPO's "clip-higher" raises ε_high (0.28) so
//              unlikely tokens with A > 0 can grow further.
//   reinforce  ℓ_t = −A_t·lp,  dℓ/dlp = −A_t    (on-policy: no ratio, no clip). At ρ = 1 exactly
//              (lp_old = lp, one step per batch) its gradient is the clipped one's.
// plus, with β = kl_coef > 0, a KL penalty to the reference by Schulman's k3 estimator
//   k3_t = exp(lp_ref − lp) − (lp_ref − lp) − 1 >= 0,   dk3/dlp = 1 − exp(lp_ref − lp)
// (unbiased for KL(π‖π_ref) on tokens sampled from π, never negative; GRPO's), ℓ_t += β·k3_t.
// L = Σ_s w_s Σ_{t∈s counted} ℓ_t with w_s from the aggregation (loss_aggregation.hpp), and
// dL/dlp_t = w_s·dℓ_t/dlp (0 at tokens not counted).
//
// Recipes: GRPO = grpo advantages + clipped + sequence_mean (β 0.04 in DeepSeekMath);
// DAPO = grpo advantages + clipped with ε_high 0.28 + token_mean, β 0; Dr. GRPO =
// reinforce_group_mean advantages + clipped + constant; PPO = ppo_gae advantages + clipped +
// token_mean, with value_loss.hpp; REINFORCE = a group-mean or EMA baseline + reinforce.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "posttrain/loss_aggregation.hpp"

namespace nanogpt {

enum class PolicyObjective { kClipped, kReinforce };

// "clipped", "reinforce".
const char* policy_objective_name(PolicyObjective objective);
// The inverse of policy_objective_name; any other name is an InputError listing the valid ones.
PolicyObjective parse_policy_objective(std::string_view name);

struct PolicyLossConfig {
  PolicyObjective objective = PolicyObjective::kClipped;
  double clip_low = 0.2;   // ε_low, in [0, 1]
  double clip_high = 0.2;  // ε_high, >= 0
  double kl_coef = 0.0;    // β, >= 0; > 0 needs logp_ref
  AggregationConfig aggregation;
};

// A batch (or a part of one) of sequences, every span one entry per token of the layout.
struct PolicyTokens {
  SequenceLayout layout;
  std::span<const double> logp;        // under the policy being trained (what L differentiates)
  std::span<const double> logp_old;    // under the sampling policy; may be empty for reinforce
  std::span<const double> logp_ref;    // under the reference; may be empty when kl_coef is 0
  std::span<const double> advantages;  // A_t
};

struct PolicyLossResult {
  double loss = 0;                // L
  std::vector<double> grad_logp;  // dL/dlogp_t, one per token, 0 at tokens not counted
  // Metrics over this call's counted tokens, plain means: combine micro-batches by weighting
  // each with its `tokens`.
  double clip_fraction = 0;  // tokens where the clip is active (0 for reinforce)
  double mean_kl = 0;        // mean k3 (0 without logp_ref)
  double mean_ratio = 1;     // mean ρ (1 for reinforce without logp_old)
  int64_t tokens = 0;        // counted tokens
};

// L and its gradient for `batch`, a part of a batch whose counts are `whole` (pass
// count_normalizers of the whole batch, or the sum of its parts'), so that the parts' results
// add up to the whole batch's. InputErrors for ε, β, max_length out of range, arrays of the wrong
// length, non-finite inputs and normalizers smaller than the part.
// The configuration's own checks (ε, β in range), what policy_loss checks first: a trainer calls it
// before it writes anything.
void check_policy_loss_config(const PolicyLossConfig& config);
PolicyLossResult policy_loss(const PolicyTokens& batch, const PolicyLossConfig& config,
                             const LossNormalizers& whole);
// The whole batch in one call: normalizers counted from `batch`.
PolicyLossResult policy_loss(const PolicyTokens& batch, const PolicyLossConfig& config);

}  // namespace nanogpt
