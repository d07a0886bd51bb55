// Weightless RMSNorm, as the seed's norm(): y = x / sqrt(mean(x²) + eps), eps = float32
// machine epsilon. Rows of `dim` elements, each with its own scale; `rstd` keeps 1/rms per row
// for the backward. Sums run in double for either scalar type, in fixed lanes (dot.hpp).
#pragma once

#include <cmath>
#include <cstdint>

#include "kernels/dot.hpp"

namespace nanogpt {

inline constexpr float kRmsNormEps = 1.1920929e-07f;  // std::numeric_limits<float>::epsilon()

// x and y may alias. Row r reads x[r·ld_x ...], writes y[r·ld_y ...].
template <class Real>
void rmsnorm_forward(const Real* x, int64_t ld_x, Real* y, int64_t ld_y, Real* rstd, int64_t rows,
                     int64_t dim) {
  for (int64_t r = 0; r < rows; ++r) {
    const Real* xr = x + r * ld_x;
    Real* yr = y + r * ld_y;
    const double ss = dot_double(xr, xr, dim);
    const Real s = static_cast<Real>(1.0 / std::sqrt(ss / static_cast<double>(dim) + kRmsNormEps));
    rstd[r] = s;
    for (int64_t i = 0; i < dim; ++i) yr[i] = xr[i] * s;
  }
}

// dx = rstd·(dy − y·mean(dy∘y)), from the normalized output y. accumulate: dx += instead of =.
// dx may alias dy.
template <class Real>
void rmsnorm_backward(const Real* y, int64_t ld_y, const Real* rstd, const Real* dy, int64_t ld_dy,
                      Real* dx, int64_t ld_dx, int64_t rows, int64_t dim, bool accumulate) {
  for (int64_t r = 0; r < rows; ++r) {
    const Real* yr = y + r * ld_y;
    const Real* dyr = dy + r * ld_dy;
    Real* dxr = dx + r * ld_dx;
    const double dot = dot_double(dyr, yr, dim);
    const Real mean = static_cast<Real>(dot / static_cast<double>(dim));
    const Real s = rstd[r];
    if (accumulate) {
      for (int64_t i = 0; i < dim; ++i) dxr[i] += s * (dyr[i] - yr[i] * mean);
    } else {
      for (int64_t i = 0; i < dim; ++i) dxr[i] = s * (dyr[i] - yr[i] * mean);
    }
  }
}

}  // namespace nanogpt
