#include "posttrain/value_loss.hpp"

#include <algorithm>
#include <string>

#include "posttrain/loss_checks.hpp"
#include "runtime/error.hpp"

namespace nanogpt {
namespace {

constexpr const char* kLoss = "value loss";

void check(const ValueTokens& batch, const ValueLossConfig& config) {
  using namespace posttrain_checks;
  require(config.value_clip >= 0, kLoss, "value_clip", config.value_clip,
          ">= 0 (0: no clipping; TRL's cliprange_value is 0.2)");
  check_layout(batch.layout, kLoss);
  const size_t n = batch.layout.mask.size();
  require_length(batch.values.size(), n, kLoss, "values", "the mask", "token");
  require_length(batch.returns.size(), n, kLoss, "returns", "the mask", "token");
  if (config.value_clip > 0) {
    if (batch.old_values.empty() && n > 0) {
      throw InputError(std::string(kLoss) + ": value_clip = " + show(config.value_clip) +
                       " needs old_values, the values the returns were computed with (or set "
                       "value_clip to 0)");
    }
    require_length(batch.old_values.size(), n, kLoss, "old_values", "the mask", "token");
  }
  require_finite(batch.values, kLoss, "values");
  require_finite(batch.old_values, kLoss, "old_values");
  require_finite(batch.returns, kLoss, "returns");
}

}  // namespace

ValueLossResult value_loss(const ValueTokens& batch, const ValueLossConfig& config) {
  check_layout(batch.layout, kLoss);
  return value_loss(batch, config, count_normalizers(batch.layout));
}

ValueLossResult value_loss(const ValueTokens& batch, const ValueLossConfig& config,
                           const LossNormalizers& whole) {
  check(batch, config);
  const SequenceLayout& layout = batch.layout;
  const std::vector<double> weights = sequence_weights(config.aggregation, layout, whole, kLoss);
  const double eps = config.value_clip;

  ValueLossResult r;
  r.grad_values.assign(layout.mask.size(), 0.0);
  double loss = 0;
  int64_t clipped_tokens = 0;
  for (int64_t s = 0; s < layout.sequences(); ++s) {
    const double w = weights[static_cast<size_t>(s)];
    double sequence_loss = 0;
    for (int64_t t = layout.offsets[s]; t < layout.offsets[s + 1]; ++t) {
      if (layout.mask[t] == 0) continue;
      ++r.tokens;
      const double error = batch.values[t] - batch.returns[t];
      double squared = error * error, grad = error;
      if (eps > 0) {
        const double old = batch.old_values[t];
        const double clipped = old + std::clamp(batch.values[t] - old, -eps, eps);
        const double clipped_error = clipped - batch.returns[t];
        if (clipped_error * clipped_error > squared) {
          squared = clipped_error * clipped_error;
          grad = 0;
          ++clipped_tokens;
        }
      }
      sequence_loss += 0.5 * squared;
      r.grad_values[t] = w * grad;
    }
    loss += w * sequence_loss;
  }
  r.loss = loss;
  if (r.tokens > 0) r.clip_fraction = static_cast<double>(clipped_tokens) / r.tokens;
  return r;
}

}  // namespace nanogpt
