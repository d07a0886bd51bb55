// Weightless RMSNorm, as the seed's norm(): y = x / sqrt(mean(x²) + eps), eps = float32
// machine epsilon. Rows of `dim` elements, each with its own scale; `rstd` keeps 1/rms per row
// for the backward. Sums run in double for either scalar type, in fixed lanes (dot.hpp).
#pragma once

#include <cmath>
#include <cstdint>

#include "kernels/dot.hpp"
#include "kernels/target.hpp"

namespace nanogpt {

inline constexpr float kRmsNormEps = 1.1920929e-07f;  // std::numeric_limits<float>::epsilon()

// The loops, always inlined so that the float versions' clones (rmsnorm.cpp) each compile them
// for their own ISA, as dot_double_lanes is.
template <class Real>
NANOGPT_ALWAYS_INLINE void rmsnorm_forward_rows(const Real* x, int64_t ld_x, Real* y, int64_t ld_y,
                                                Real* rstd, int64_t rows, int64_t dim) {
  for (int64_t r = 0; r < rows; ++r) {
    const Real* xr = x + r * ld_x;
    Real* yr = y + r * ld_y;
    const double ss = dot_double(xr, xr, dim);
    const Real s = static_cast<Real>(1.0 / std::sqrt(ss / static_cast<double>(dim) + kRmsNormEps));
    rstd[r] = s;
    for (int64_t i = 0; i < dim; ++i) yr[i] = xr[i] * s;
  }
}

template <class Real>
NANOGPT_ALWAYS_INLINE void rmsnorm_backward_rows(const Real* y, int64_t ld_y, const Real* rstd,
                                                 const Real* dy, int64_t ld_dy, Real* dx,
                                                 int64_t ld_dx, int64_t rows, int64_t dim,
                                                 bool accumulate) {
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

// x and y may alias. Row r reads x[r·ld_x ...], writes y[r·ld_y ...]. The float version is
// compiled for AVX-512, AVX2 and the baseline (rmsnorm.cpp), each giving the same bits.
void rmsnorm_forward(const float* x, int64_t ld_x, float* y, int64_t ld_y, float* rstd,
                     int64_t rows, int64_t dim);
inline void rmsnorm_forward(const double* x, int64_t ld_x, double* y, int64_t ld_y, double* rstd,
                            int64_t rows, int64_t dim) {
  rmsnorm_forward_rows(x, ld_x, y, ld_y, rstd, rows, dim);
}

// dx = rstd·(dy − y·mean(dy∘y)), from the normalized output y. accumulate: dx += instead of =.
// dx may alias dy.
void rmsnorm_backward(const float* y, int64_t ld_y, const float* rstd, const float* dy,
                      int64_t ld_dy, float* dx, int64_t ld_dx, int64_t rows, int64_t dim,
                      bool accumulate);
inline void rmsnorm_backward(const double* y, int64_t ld_y, const double* rstd, const double* dy,
                             int64_t ld_dy, double* dx, int64_t ld_dx, int64_t rows, int64_t dim,
                             bool accumulate) {
  rmsnorm_backward_rows(y, ld_y, rstd, dy, ld_dy, dx, ld_dx, rows, dim, accumulate);
}

}  // namespace nanogpt
