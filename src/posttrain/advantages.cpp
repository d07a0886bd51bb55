#include "posttrain/advantages.hpp"

#include <array>

#include <cmath>
#include <string>
#include <utility>

#include "posttrain/loss_checks.hpp"
#include "runtime/error.hpp"

namespace nanogpt {
namespace {

constexpr std::pair<AdvantageEstimator, const char*> kEstimators[] = {
    {AdvantageEstimator::kReinforceGroupMean, "reinforce_group_mean"},
    {AdvantageEstimator::kReinforceEma, "reinforce_ema"},
    {AdvantageEstimator::kGrpo, "grpo"},
    {AdvantageEstimator::kPpoGae, "ppo_gae"}};

void check_groups(std::span<const double> rewards, int64_t group_size, const char* estimator) {
  const std::string where = std::string(estimator) + " advantages";
  if (group_size < 2) {
    throw InputError(where + ": group_size = " + std::to_string(group_size) +
                     " is out of range; it must be >= 2 (a group of one is its own baseline, "
                     "every advantage would be 0): sample several completions per prompt");
  }
  if (rewards.size() % static_cast<size_t>(group_size) != 0) {
    throw InputError(
        where + ": " + std::to_string(rewards.size()) +
        " rewards do not split into groups of group_size = " + std::to_string(group_size) +
        "; give every prompt's group_size completions, one group after another");
  }
  posttrain_checks::require_finite(rewards, where, "rewards");
}

// Centres each group on its mean; divides by its sample std + std_eps when `std_eps` is given.
GroupAdvantages centre_groups(std::span<const double> rewards, int64_t group_size,
                              const double* std_eps) {
  GroupAdvantages out;
  out.advantages.assign(rewards.size(), 0.0);
  const size_t g = static_cast<size_t>(group_size);
  for (size_t start = 0; start < rewards.size(); start += g) {
    const std::span<const double> group = rewards.subspan(start, g);
    bool uniform = true;
    for (double r : group) uniform = uniform && r == group[0];
    if (uniform) {
      ++out.uniform_groups;  // advantages stay exactly 0
      continue;
    }
    double sum = 0;
    for (double r : group) sum += r;
    const double mean = sum / static_cast<double>(g);
    double scale = 1.0;
    if (std_eps != nullptr) {
      double squares = 0;
      for (double r : group) squares += (r - mean) * (r - mean);
      scale = 1.0 / (std::sqrt(squares / static_cast<double>(g - 1)) + *std_eps);
    }
    for (size_t i = 0; i < g; ++i) out.advantages[start + i] = (group[i] - mean) * scale;
  }
  return out;
}

}  // namespace

const char* advantage_estimator_name(AdvantageEstimator estimator) {
  for (auto [e, name] : kEstimators) {
    if (e == estimator) return name;
  }
  throw Error("internal: an advantage estimator without a name");
}

AdvantageEstimator parse_advantage_estimator(std::string_view name) {
  for (auto [e, n] : kEstimators) {
    if (name == n) return e;
  }
  throw InputError("unknown advantage estimator '" + std::string(name) +
                   "'; valid estimators: \"reinforce_group_mean\", \"reinforce_ema\", \"grpo\" "
                   "or \"ppo_gae\"");
}

GroupAdvantages group_mean_advantages(std::span<const double> rewards, int64_t group_size) {
  check_groups(rewards, group_size, "reinforce_group_mean");
  return centre_groups(rewards, group_size, nullptr);
}

GroupAdvantages grpo_advantages(std::span<const double> rewards, int64_t group_size,
                                double std_eps) {
  check_groups(rewards, group_size, "grpo");
  posttrain_checks::require(std_eps >= 0, "grpo advantages", "std_eps", std_eps,
                            ">= 0 (TRL's is 1e-4)");
  return centre_groups(rewards, group_size, &std_eps);
}

std::vector<double> ema_advantages(std::span<const double> rewards, EmaBaseline& baseline) {
  constexpr const char* kWhere = "reinforce_ema advantages";
  posttrain_checks::require(baseline.decay >= 0 && baseline.decay < 1, kWhere, "decay",
                            baseline.decay, "in [0, 1) (0.9 by default)");
  posttrain_checks::require(true, kWhere, "baseline value", baseline.value, "finite");
  posttrain_checks::require_finite(rewards, kWhere, "rewards");
  std::vector<double> advantages(rewards.size());
  double sum = 0;
  for (size_t i = 0; i < rewards.size(); ++i) {
    advantages[i] = rewards[i] - baseline.value;
    sum += rewards[i];
  }
  if (!rewards.empty()) {
    const double mean = sum / static_cast<double>(rewards.size());
    baseline.value = baseline.decay * baseline.value + (1.0 - baseline.decay) * mean;
  }
  return advantages;
}

GaeResult gae_advantages(const SequenceLayout& layout, std::span<const double> rewards,
                         std::span<const double> values, const GaeConfig& config) {
  constexpr const char* kWhere = "ppo_gae advantages";
  using namespace posttrain_checks;
  require(config.gamma >= 0 && config.gamma <= 1, kWhere, "gamma", config.gamma,
          "in [0, 1] (1 by default: no discount within a completion)");
  require(config.lambda >= 0 && config.lambda <= 1, kWhere, "lambda", config.lambda,
          "in [0, 1] (0.95 by default)");
  check_layout(layout, kWhere);
  const size_t n = layout.mask.size();
  require_length(rewards.size(), n, kWhere, "rewards", "the mask", "token");
  require_length(values.size(), n, kWhere, "values", "the mask", "token");
  require_finite(rewards, kWhere, "rewards");
  require_finite(values, kWhere, "values");

  GaeResult out;
  out.advantages.assign(n, 0.0);
  out.returns.assign(n, 0.0);
  const double gamma_lambda = config.gamma * config.lambda;
  for (int64_t s = 0; s < layout.sequences(); ++s) {
    // Backwards over the sequence's counted tokens; after the last one the value is 0.
    double next_value = 0, next_advantage = 0;
    for (int64_t t = layout.offsets[s + 1] - 1; t >= layout.offsets[s]; --t) {
      if (layout.mask[t] == 0) continue;
      const double delta = rewards[t] + config.gamma * next_value - values[t];
      const double advantage = delta + gamma_lambda * next_advantage;
      out.advantages[t] = advantage;
      out.returns[t] = advantage + values[t];
      next_value = values[t];
      next_advantage = advantage;
    }
  }
  return out;
}

void whiten_advantages(const SequenceLayout& layout, std::span<double> advantages,
                       const PartSums& sum_parts) {
  constexpr const char* kWhere = "whiten_advantages";
  check_layout(layout, kWhere);
  posttrain_checks::require_length(advantages.size(), layout.mask.size(), kWhere, "advantages",
                                   "the mask", "token");
  posttrain_checks::require_finite(advantages, kWhere, "advantages");
  std::array<double, 2> sum_n = {0, 0};
  for (size_t t = 0; t < advantages.size(); ++t) {
    if (layout.mask[t] == 0) continue;
    sum_n[0] += advantages[t];
    sum_n[1] += 1;
  }
  if (sum_parts) sum_parts(sum_n);
  const auto n = static_cast<int64_t>(sum_n[1]);
  if (n == 0) return;
  const double mean = sum_n[0] / static_cast<double>(n);
  double squares = 0;
  for (size_t t = 0; t < advantages.size(); ++t) {
    if (layout.mask[t] != 0) squares += (advantages[t] - mean) * (advantages[t] - mean);
  }
  if (sum_parts) sum_parts(std::span<double>(&squares, 1));
  const double var = n > 1 ? squares / static_cast<double>(n - 1) : 0.0;
  const double scale = 1.0 / std::sqrt(var + 1e-8);
  for (size_t t = 0; t < advantages.size(); ++t) {
    advantages[t] = layout.mask[t] != 0 ? (advantages[t] - mean) * scale : 0.0;
  }
}

std::vector<double> advantages_per_token(const SequenceLayout& layout,
                                         std::span<const double> sequence_advantages) {
  constexpr const char* kWhere = "advantages_per_token";
  check_layout(layout, kWhere);
  posttrain_checks::require_length(sequence_advantages.size(),
                                   static_cast<size_t>(layout.sequences()), kWhere,
                                   "sequence_advantages", "the layout", "sequence");
  std::vector<double> per_token(layout.mask.size(), 0.0);
  for (int64_t s = 0; s < layout.sequences(); ++s) {
    for (int64_t t = layout.offsets[s]; t < layout.offsets[s + 1]; ++t) {
      if (layout.mask[t] != 0) per_token[t] = sequence_advantages[s];
    }
  }
  return per_token;
}

}  // namespace nanogpt
