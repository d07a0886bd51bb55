#include "posttrain/dpo_loss.hpp"

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>

#include "posttrain/loss_checks.hpp"
#include "runtime/error.hpp"

namespace nanogpt {
namespace {

constexpr std::pair<DpoLossKind, const char*> kKinds[] = {
    {DpoLossKind::kSigmoid, "sigmoid"}, {DpoLossKind::kIpo, "ipo"}, {DpoLossKind::kHinge, "hinge"}};

constexpr const char* kLoss = "DPO loss";

// −log σ(x) = log(1 + e^(−x)), without overflow for large −x nor lost digits for large x:
// max(−x, 0) + log1p(e^(−|x|)).
double neg_log_sigmoid(double x) {
  return std::max(-x, 0.0) + std::log1p(std::exp(-std::abs(x)));
}

// σ(x) without overflow: e^(−|x|) never exceeds 1.
double sigmoid(double x) {
  const double e = std::exp(-std::abs(x));
  return x >= 0 ? 1.0 / (1.0 + e) : e / (1.0 + e);
}

}  // namespace

const char* dpo_loss_kind_name(DpoLossKind kind) {
  for (auto [k, name] : kKinds) {
    if (k == kind) return name;
  }
  throw Error("internal: a DPO loss kind without a name");
}

DpoLossKind parse_dpo_loss_kind(std::string_view name) {
  for (auto [k, n] : kKinds) {
    if (name == n) return k;
  }
  throw InputError("unknown DPO loss '" + std::string(name) +
                   "'; valid losses: \"sigmoid\", \"ipo\" or \"hinge\"");
}

DpoResult dpo_loss(const DpoLogps& logps, const DpoConfig& config) {
  return dpo_loss(logps, config, static_cast<int64_t>(logps.policy_chosen.size()));
}

DpoResult dpo_loss(const DpoLogps& logps, const DpoConfig& config, int64_t batch_pairs) {
  using namespace posttrain_checks;
  require(config.beta > 0, kLoss, "beta", config.beta, "> 0 (TRL's default is 0.1)");
  const size_t n = logps.policy_chosen.size();
  require_length(logps.policy_rejected.size(), n, kLoss, "policy_rejected", "policy_chosen",
                 "pair");
  require_length(logps.reference_chosen.size(), n, kLoss, "reference_chosen", "policy_chosen",
                 "pair");
  require_length(logps.reference_rejected.size(), n, kLoss, "reference_rejected", "policy_chosen",
                 "pair");
  require_finite(logps.policy_chosen, kLoss, "policy_chosen");
  require_finite(logps.policy_rejected, kLoss, "policy_rejected");
  require_finite(logps.reference_chosen, kLoss, "reference_chosen");
  require_finite(logps.reference_rejected, kLoss, "reference_rejected");
  if (batch_pairs < static_cast<int64_t>(n)) {
    throw InputError(std::string(kLoss) + ": batch_pairs = " + std::to_string(batch_pairs) +
                     " is smaller than this call's " + std::to_string(n) +
                     " pairs; pass the number of pairs of the whole batch");
  }

  const double beta = config.beta;
  DpoResult r;
  r.pairs = static_cast<int64_t>(n);
  r.grad_policy_chosen.resize(n);
  r.grad_policy_rejected.resize(n);
  // Zero pairs in the whole batch: nothing to average, L = 0.
  const double inv_batch = batch_pairs > 0 ? 1.0 / static_cast<double>(batch_pairs) : 0.0;
  double loss_sum = 0, chosen_sum = 0, rejected_sum = 0;
  int64_t correct = 0;
  for (size_t i = 0; i < n; ++i) {
    const double chosen_logratio = logps.policy_chosen[i] - logps.reference_chosen[i];
    const double rejected_logratio = logps.policy_rejected[i] - logps.reference_rejected[i];
    const double h = chosen_logratio - rejected_logratio;
    double loss = 0, dloss_dh = 0;
    switch (config.kind) {
      case DpoLossKind::kSigmoid:
        loss = neg_log_sigmoid(beta * h);
        dloss_dh = -beta * sigmoid(-beta * h);
        break;
      case DpoLossKind::kIpo: {
        const double gap = h - 1.0 / (2.0 * beta);
        loss = gap * gap;
        dloss_dh = 2.0 * gap;
        break;
      }
      case DpoLossKind::kHinge:
        // At the kink (β·h = 1 exactly) the gradient is 0, as torch's relu gives.
        if (1.0 - beta * h > 0) {
          loss = 1.0 - beta * h;
          dloss_dh = -beta;
        }
        break;
    }
    loss_sum += loss;
    r.grad_policy_chosen[i] = dloss_dh * inv_batch;
    r.grad_policy_rejected[i] = -dloss_dh * inv_batch;
    const double reward_chosen = beta * chosen_logratio;
    const double reward_rejected = beta * rejected_logratio;
    chosen_sum += reward_chosen;
    rejected_sum += reward_rejected;
    correct += reward_chosen > reward_rejected;
  }
  r.loss = loss_sum * inv_batch;
  if (n > 0) {
    const double inv_n = 1.0 / static_cast<double>(n);
    r.reward_chosen = chosen_sum * inv_n;
    r.reward_rejected = rejected_sum * inv_n;
    r.reward_margin = (chosen_sum - rejected_sum) * inv_n;
    r.reward_accuracy = static_cast<double>(correct) * inv_n;
  }
  return r;
}

}  // namespace nanogpt
