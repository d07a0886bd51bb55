#include "optim/muon.hpp"

#include <algorithm>
#include <cmath>
#include <string>

#include "optim/elementwise.hpp"
#include "runtime/error.hpp"

namespace nanogpt {

void muon_update(float* p, const float* g, float* buf, int64_t rows, int64_t cols, double lr,
                 double momentum, int ns_steps, NewtonSchulzWorkspace& ws, bool nesterov) {
  if (rows <= 0 || cols <= 0 || ns_steps < 0 || !(momentum >= 0.0 && momentum <= 1.0)) {
    throw Error("muon_update: invalid arguments rows=" + std::to_string(rows) +
                " cols=" + std::to_string(cols) + " ns_steps=" + std::to_string(ns_steps) +
                " momentum=" + std::to_string(momentum) +
                " (need a non-empty matrix, ns_steps >= 0, momentum in [0, 1])");
  }
  const int64_t n = rows * cols;
  if (ws.staging.size() < static_cast<size_t>(n)) ws.staging.resize(static_cast<size_t>(n));
  float* u = ws.staging.data();

  // 1 − m is formed in double before rounding, as the reference's Python scalars are: with
  // m = 0.9 that gives 0.1f, where 1 − 0.9f would be off by three ulps.
  const float m = static_cast<float>(momentum);
  const float one_minus_m = static_cast<float>(1.0 - momentum);
  for_each_chunk(n, [&](int64_t, int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const float b = m * buf[i] + one_minus_m * g[i];
      buf[i] = b;
      u[i] = nesterov ? one_minus_m * g[i] + m * b : b;
    }
  });

  newton_schulz5(u, rows, cols, ns_steps, u, ws);

  const double aspect = static_cast<double>(rows) / static_cast<double>(cols);
  const float step = static_cast<float>(lr * std::sqrt(std::max(1.0, aspect)));
  for_each_chunk(n, [&](int64_t, int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) p[i] -= step * u[i];
  });
}

}  // namespace nanogpt
