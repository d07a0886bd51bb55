#include "optim/adam.hpp"

#include <cmath>
#include <string>

#include "optim/elementwise.hpp"
#include "runtime/error.hpp"

namespace nanogpt {

void adam_update(float* p, const float* g, float* exp_avg, float* exp_avg_sq, int64_t n, double lr,
                 const AdamConfig& config, int64_t step) {
  if (n < 0 || step < 1) {
    throw Error("adam_update: invalid arguments n=" + std::to_string(n) +
                " step=" + std::to_string(step) + " (steps count from 1)");
  }
  // Scalars as torch forms them: in double, rounded to float where they meet a tensor.
  const double s = static_cast<double>(step);
  const double bias_correction1 = 1.0 - std::pow(config.beta1, s);
  const double bias_correction2 = 1.0 - std::pow(config.beta2, s);
  const float neg_step_size = static_cast<float>(-(lr / bias_correction1));
  const float bias_correction2_sqrt = static_cast<float>(std::sqrt(bias_correction2));
  const float beta1 = static_cast<float>(config.beta1);
  const float beta2 = static_cast<float>(config.beta2);
  const float one_minus_beta1 = static_cast<float>(1.0 - config.beta1);
  const float one_minus_beta2 = static_cast<float>(1.0 - config.beta2);
  const float eps = static_cast<float>(config.eps);

  // Each line is one torch op, rounded where torch rounds: mul_(β1).add_(g, alpha=1−β1);
  // mul_(β2).addcmul_(g, g, value=1−β2); (sqrt() / bc2_sqrt).add_(eps);
  // addcdiv_(exp_avg, denom, value=−step_size), which evaluates value·exp_avg / denom.
  for_each_chunk(n, [&](int64_t, int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const float gi = g[i];
      const float m = beta1 * exp_avg[i] + one_minus_beta1 * gi;
      const float v = beta2 * exp_avg_sq[i] + one_minus_beta2 * gi * gi;
      exp_avg[i] = m;
      exp_avg_sq[i] = v;
      const float denom = std::sqrt(v) / bias_correction2_sqrt + eps;
      p[i] += neg_step_size * m / denom;
    }
  });
}

}  // namespace nanogpt
