#include "posttrain/policy_gradient.hpp"

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>

#include "posttrain/loss_checks.hpp"
#include "runtime/error.hpp"

namespace nanogpt {
namespace {

constexpr std::pair<PolicyObjective, const char*> kObjectives[] = {
    {PolicyObjective::kClipped, "clipped"}, {PolicyObjective::kReinforce, "reinforce"}};

constexpr const char* kLoss = "policy loss";

void check(const PolicyTokens& batch, const PolicyLossConfig& config) {
  using namespace posttrain_checks;
  const bool clipped = config.objective == PolicyObjective::kClipped;
  check_policy_loss_config(config);
  check_layout(batch.layout, kLoss);
  const size_t n = batch.layout.mask.size();
  require_length(batch.logp.size(), n, kLoss, "logp", "the mask", "token");
  require_length(batch.advantages.size(), n, kLoss, "advantages", "the mask", "token");
  if (clipped || !batch.logp_old.empty()) {
    if (batch.logp_old.empty() && n > 0) {
      throw InputError(std::string(kLoss) +
                       ": the clipped objective needs logp_old, the log-probabilities under the "
                       "policy that sampled the tokens (for on-policy REINFORCE without them, "
                       "set objective to \"reinforce\")");
    }
    require_length(batch.logp_old.size(), n, kLoss, "logp_old", "the mask", "token");
  }
  if (config.kl_coef > 0 && batch.logp_ref.empty() && n > 0) {
    throw InputError(std::string(kLoss) + ": kl_coef = " + show(config.kl_coef) +
                     " needs logp_ref, the reference model's log-probabilities (or set kl_coef "
                     "to 0)");
  }
  if (!batch.logp_ref.empty()) {
    require_length(batch.logp_ref.size(), n, kLoss, "logp_ref", "the mask", "token");
  }
  require_finite(batch.logp, kLoss, "logp");
  require_finite(batch.logp_old, kLoss, "logp_old");
  require_finite(batch.logp_ref, kLoss, "logp_ref");
  require_finite(batch.advantages, kLoss, "advantages");
}

}  // namespace

const char* policy_objective_name(PolicyObjective objective) {
  for (auto [o, name] : kObjectives) {
    if (o == objective) return name;
  }
  throw Error("internal: a policy objective without a name");
}

PolicyObjective parse_policy_objective(std::string_view name) {
  for (auto [o, n] : kObjectives) {
    if (name == n) return o;
  }
  throw InputError("unknown policy objective '" + std::string(name) +
                   "'; valid objectives: \"clipped\" (PPO, GRPO) or \"reinforce\"");
}

void check_policy_loss_config(const PolicyLossConfig& config) {
  using namespace posttrain_checks;
  if (config.objective == PolicyObjective::kClipped) {
    require(config.clip_low >= 0 && config.clip_low <= 1, kLoss, "clip_low", config.clip_low,
            "in [0, 1] (PPO's ε, 0.2 by default)");
    require(config.clip_high >= 0, kLoss, "clip_high", config.clip_high,
            ">= 0 (PPO's ε, 0.2 by default; DAPO's clip-higher 0.28)");
  }
  require(config.kl_coef >= 0, kLoss, "kl_coef", config.kl_coef,
          ">= 0 (0 by default: no KL penalty; DeepSeekMath's GRPO uses 0.04)");
}

PolicyLossResult policy_loss(const PolicyTokens& batch, const PolicyLossConfig& config) {
  check_layout(batch.layout, kLoss);
  return policy_loss(batch, config, count_normalizers(batch.layout));
}

PolicyLossResult policy_loss(const PolicyTokens& batch, const PolicyLossConfig& config,
                             const LossNormalizers& whole) {
  check(batch, config);
  const SequenceLayout& layout = batch.layout;
  const std::vector<double> weights = sequence_weights(config.aggregation, layout, whole, kLoss);
  const bool clipped = config.objective == PolicyObjective::kClipped;
  const bool has_old = !batch.logp_old.empty();
  const bool has_ref = !batch.logp_ref.empty();
  const double low = 1.0 - config.clip_low, high = 1.0 + config.clip_high;

  PolicyLossResult r;
  r.grad_logp.assign(layout.mask.size(), 0.0);
  double loss = 0, ratio_sum = 0, kl_sum = 0;
  int64_t clipped_tokens = 0;
  for (int64_t s = 0; s < layout.sequences(); ++s) {
    const double w = weights[static_cast<size_t>(s)];
    double sequence_loss = 0;  // Σ ℓ_t over the sequence, then weighted once
    for (int64_t t = layout.offsets[s]; t < layout.offsets[s + 1]; ++t) {
      if (layout.mask[t] == 0) continue;
      ++r.tokens;
      const double a = batch.advantages[t];
      const double lp = batch.logp[t];
      double token_loss = 0, grad = 0;
      const double ratio = has_old ? std::exp(lp - batch.logp_old[t]) : 1.0;
      ratio_sum += ratio;
      if (clipped) {
        const bool clip_active = (a > 0 && ratio > high) || (a < 0 && ratio < low);
        if (clip_active) {
          token_loss = -std::clamp(ratio, low, high) * a;  // a constant: no gradient
          ++clipped_tokens;
        } else {
          token_loss = -ratio * a;
          grad = -a * ratio;
        }
      } else {
        token_loss = -a * lp;
        grad = -a;
      }
      if (has_ref) {
        // x = log(π_ref/π); expm1 keeps k3 = (e^x − 1) − x accurate where x is small.
        const double x = batch.logp_ref[t] - lp;
        const double ref_ratio_minus_1 = std::expm1(x);
        const double k3 = ref_ratio_minus_1 - x;
        kl_sum += k3;
        if (config.kl_coef > 0) {
          token_loss += config.kl_coef * k3;
          grad += config.kl_coef * -ref_ratio_minus_1;
        }
      }
      sequence_loss += token_loss;
      r.grad_logp[t] = w * grad;
    }
    loss += w * sequence_loss;
  }
  r.loss = loss;
  if (r.tokens > 0) {
    const double inv = 1.0 / static_cast<double>(r.tokens);
    r.clip_fraction = static_cast<double>(clipped_tokens) * inv;
    r.mean_kl = kl_sum * inv;
    r.mean_ratio = ratio_sum * inv;
  }
  return r;
}

}  // namespace nanogpt
