// Element-wise linear combinations of rows, the loops of the model's residual and value mixes
// and of the gradients they accumulate. Each element is one expression evaluated as written
// (no reassociation, no fused multiply-add), so the float versions, compiled for AVX-512, AVX2
// and the baseline (axpby.cpp), all give the same bits. out may alias x or y.
#pragma once

#include <cstdint>

#include "kernels/target.hpp"

namespace nanogpt {

// out = x + a·y
template <class Real>
NANOGPT_ALWAYS_INLINE void add_scaled_loop(int64_t n, const Real* x, Real a, const Real* y,
                                           Real* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = x[i] + a * y[i];
}

// out = a·x + b·y, or a·x + 0 when y is null (the + 0 turns −0 into +0, as the mix without a
// second input does).
template <class Real>
NANOGPT_ALWAYS_INLINE void weighted_sum_loop(int64_t n, Real a, const Real* x, Real b,
                                             const Real* y, Real* out) {
  if (y != nullptr) {
    for (int64_t i = 0; i < n; ++i) out[i] = a * x[i] + b * y[i];
  } else {
    for (int64_t i = 0; i < n; ++i) out[i] = a * x[i] + Real(0);
  }
}

// out = a·x
template <class Real>
NANOGPT_ALWAYS_INLINE void scaled_copy_loop(int64_t n, Real a, const Real* x, Real* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = a * x[i];
}

void add_scaled(int64_t n, const float* x, float a, const float* y, float* out);
void weighted_sum(int64_t n, float a, const float* x, float b, const float* y, float* out);
void scaled_copy(int64_t n, float a, const float* x, float* out);

inline void add_scaled(int64_t n, const double* x, double a, const double* y, double* out) {
  add_scaled_loop(n, x, a, y, out);
}
inline void weighted_sum(int64_t n, double a, const double* x, double b, const double* y,
                         double* out) {
  weighted_sum_loop(n, a, x, b, y, out);
}
inline void scaled_copy(int64_t n, double a, const double* x, double* out) {
  scaled_copy_loop(n, a, x, out);
}

}  // namespace nanogpt
