#include "optim/adam.hpp"

#include <cmath>
#include <string>

#include "kernels/target.hpp"
#include "optim/elementwise.hpp"
#include "runtime/error.hpp"

namespace nanogpt {

namespace {

// The step's scalars, rounded to float where they meet a tensor.
struct AdamScalars {
  float beta1, one_minus_beta1, beta2, one_minus_beta2, bias_correction2_sqrt, eps, neg_step_size;
};

// Each line is one torch op, rounded where torch rounds: mul_(β1).add_(g, alpha=1−β1);
// mul_(β2).addcmul_(g, g, value=1−β2); (sqrt() / bc2_sqrt).add_(eps);
// addcdiv_(exp_avg, denom, value=−step_size), which evaluates value·exp_avg / denom.
// Compiled per ISA and built with -ffp-contract=off (CMakeLists.txt): no clone fuses a
// multiply into an add, and square root and division are correctly rounded in every width, so
// every clone gives the scalar loop's bits. The pointers are parameters, not captures: read
// through a closure they were reloaded after every store and the loop ran scalar (the cpu
// preset's Adam, 10M elements, took 18 ms a step on Zen 4, a third of the memory's rate).
NANOGPT_TARGET_CLONES void adam_range(float* __restrict p, const float* __restrict g,
                                      float* __restrict exp_avg, float* __restrict exp_avg_sq,
                                      int64_t n, const AdamScalars s) {
  for (int64_t i = 0; i < n; ++i) {
    const float gi = g[i];
    const float m = s.beta1 * exp_avg[i] + s.one_minus_beta1 * gi;
    const float v = s.beta2 * exp_avg_sq[i] + s.one_minus_beta2 * gi * gi;
    exp_avg[i] = m;
    exp_avg_sq[i] = v;
    const float denom = std::sqrt(v) / s.bias_correction2_sqrt + s.eps;
    p[i] += s.neg_step_size * m / denom;
  }
}

}  // namespace

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
  AdamScalars scalars;
  scalars.neg_step_size = static_cast<float>(-(lr / bias_correction1));
  scalars.bias_correction2_sqrt = static_cast<float>(std::sqrt(bias_correction2));
  scalars.beta1 = static_cast<float>(config.beta1);
  scalars.beta2 = static_cast<float>(config.beta2);
  scalars.one_minus_beta1 = static_cast<float>(1.0 - config.beta1);
  scalars.one_minus_beta2 = static_cast<float>(1.0 - config.beta2);
  scalars.eps = static_cast<float>(config.eps);
  for_each_chunk(n, [&](int64_t, int64_t begin, int64_t end) {
    adam_range(p + begin, g + begin, exp_avg + begin, exp_avg_sq + begin, end - begin, scalars);
  });
}

}  // namespace nanogpt
