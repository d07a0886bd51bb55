// Advantage estimators for policy-gradient post-training (issue 18, item 6): how much better than
// expected a sampled completion (or a token of it) did. The policy loss (policy_gradient.hpp)
// takes one advantage per token; a sequence-level estimator's advantage is spread over its
// sequence's tokens by advantages_per_token.
//
// REINFORCE's gradient, E[∇log π(y)·R(y)], keeps its expectation when any baseline b that does
// not depend on the sample y itself is subtracted from R, and the variance falls the closer b is
// to E[R] (the seed's "Baselines"). The estimators:
//   reinforce_group_mean  A_i = R_i − mean(R of i's group)   G completions of one prompt form a
//                         group; the mean includes R_i itself, which scales the expected
//                         gradient by (G − 1)/G, a constant factor (Dr. GRPO's advantage).
//   reinforce_ema         A_i = R_i − b, b an exponential moving average of past batches' mean
//                         rewards (EmaBaseline), for one sample per prompt.
//   grpo                  A_i = (R_i − mean_g) / (std_g + ε) (DeepSeekMath's GRPO), std_g the
//                         group's sample standard deviation (divisor G − 1). Sample, not
//                         population: TRL and open-r1, the implementations GRPO runs are compared
//                         with, take torch's default std (unbiased), so our advantages equal
//                         theirs; the two differ by √(G/(G−1)), a constant factor the learning
//                         rate absorbs. ε = 1e-4 as TRL.
//   ppo_gae               per-token advantages from a value model, GAE(γ, λ) (Schulman et al.
//                         2016): δ_t = r_t + γ·V_{t+1} − V_t (V after the last token is 0: the
//                         completion ends there), A_t = δ_t + γλ·A_{t+1}, returns R_t = A_t + V_t
//                         (the value loss's targets). λ = 1 gives the Monte-Carlo return minus V,
//                         λ = 0 the one-step TD error.
// A group whose rewards all agree has every A_i = 0 exactly under a group baseline (set to 0,
// not computed: R − mean can miss 0 by a rounding) and so no gradient; such groups are counted,
// because a batch full of them is wasted compute (DAPO's dynamic sampling drops them).
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string_view>
#include <vector>

#include "posttrain/loss_aggregation.hpp"

namespace nanogpt {

enum class AdvantageEstimator { kReinforceGroupMean, kReinforceEma, kGrpo, kPpoGae };

// "reinforce_group_mean", "reinforce_ema", "grpo", "ppo_gae".
const char* advantage_estimator_name(AdvantageEstimator estimator);
// The inverse of advantage_estimator_name; any other name is an InputError listing the valid ones.
AdvantageEstimator parse_advantage_estimator(std::string_view name);

struct GroupAdvantages {
  std::vector<double> advantages;  // one per sample, in the order of the rewards
  int64_t uniform_groups = 0;      // groups whose rewards are all equal (advantages 0)
};

// reinforce_group_mean: `rewards` holds consecutive groups of `group_size` (>= 2) samples.
GroupAdvantages group_mean_advantages(std::span<const double> rewards, int64_t group_size);

// grpo: as group_mean_advantages, divided by the group's sample std + std_eps (std_eps >= 0).
GroupAdvantages grpo_advantages(std::span<const double> rewards, int64_t group_size,
                                double std_eps = 1e-4);

// reinforce_ema's baseline. Each call of ema_advantages centres a batch on `value` as it stands,
// then moves it: value = decay·value + (1 − decay)·mean(batch rewards). Updated after use, so a
// sample's own reward never enters its baseline (which would bias the gradient); once per batch
// with the batch mean, so every sample of a batch sees the same baseline whatever their order.
// `value` starts at 0 (no baseline for the first batch) unless set, e.g. to a known mean reward.
struct EmaBaseline {
  double decay = 0.9;  // in [0, 1)
  double value = 0;
};

// reinforce_ema: R_i − baseline.value for every sample, then the update above (an empty batch
// leaves the baseline alone).
std::vector<double> ema_advantages(std::span<const double> rewards, EmaBaseline& baseline);

struct GaeConfig {
  double gamma = 1.0;    // discount, in [0, 1]
  double lambda = 0.95;  // GAE's λ, in [0, 1]
};

struct GaeResult {
  std::vector<double> advantages;  // per token, 0 at tokens the mask does not count
  std::vector<double> returns;     // per token, A_t + V_t (0 where not counted)
};

// ppo_gae over every sequence of `layout`: per-token rewards (typically the sequence's reward on
// its last counted token, 0 elsewhere, or with a per-token KL penalty added) and per-token values
// V_t, both one per token of the layout. Only counted tokens take part: the recursion runs over a
// sequence's counted tokens in order, as if the others were not there.
GaeResult gae_advantages(const SequenceLayout& layout, std::span<const double> rewards,
                         std::span<const double> values, const GaeConfig& config);

// Whitens per-token advantages over the counted tokens of the whole batch, in place, as TRL's
// masked_whiten: A ← (A − mean) / √(var + 1e-8), var the sample variance (divisor n − 1; a lone
// counted token becomes 0). Tokens not counted stay 0. PPO implementations whiten GAE's advantages
// so their scale does not depend on the reward's or the value head's; rl does it only when asked
// (--whiten-advantages, rl.hpp says why).
// `sum_parts`, when the batch is split (MPI ranks each holding a part): sums its argument over
// the parts in place, so the mean and variance are the whole batch's (every part calls it the
// same number of times: twice, or not at all when nothing is counted anywhere).
using PartSums = std::function<void(std::span<double>)>;
void whiten_advantages(const SequenceLayout& layout, std::span<double> advantages,
                       const PartSums& sum_parts = {});

// A sequence-level advantage for each sequence of `layout`, copied to its counted tokens
// (0 at the others): the per-token advantages the policy loss takes.
std::vector<double> advantages_per_token(const SequenceLayout& layout,
                                         std::span<const double> sequence_advantages);

}  // namespace nanogpt
