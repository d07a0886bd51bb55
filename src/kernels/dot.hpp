// Sums of products in double over a fixed set of lanes. A single double accumulator makes the
// loop one chain of dependent additions, 4 cycles each, that the compiler may not reorder; the
// norms and the scalar parameters' gradients of a training step spent about 40 ms on such
// chains. kDotLanes independent partial sums (element i goes to lane i mod kDotLanes) are
// combined in lane order at the end: the compiler vectorizes them, and the result is the same
// on every machine and thread count (it depends only on n).
#pragma once

#include <cstdint>

#include "kernels/target.hpp"

namespace nanogpt {

inline constexpr int kDotLanes = 8;

// Lane partial sums → one value, always in the same order.
inline double combine_lanes(const double (&lanes)[kDotLanes]) {
  double s = 0;
  for (int l = 0; l < kDotLanes; ++l) s += lanes[l];
  return s;
}

// Σ a[i]·b[i] in double. Always inlined: dot_double's clones (dot.cpp) must each compile this
// loop for their own ISA; a call out of them would run one baseline (SSE2) copy for all three.
template <class Real>
NANOGPT_ALWAYS_INLINE double dot_double_lanes(const Real* a, const Real* b, int64_t n) {
  double lanes[kDotLanes] = {};
  int64_t i = 0;
  for (; i + kDotLanes <= n; i += kDotLanes) {
    for (int l = 0; l < kDotLanes; ++l) {
      lanes[l] += static_cast<double>(a[i + l]) * static_cast<double>(b[i + l]);
    }
  }
  for (int l = 0; l < kDotLanes; ++l) {
    if (i + l < n) lanes[l] += static_cast<double>(a[i + l]) * static_cast<double>(b[i + l]);
  }
  return combine_lanes(lanes);
}

// The float version is compiled for AVX-512, AVX2 and the baseline and picked at run time
// (dot.cpp); all three sum the same lanes in the same order, so they agree bit for bit.
double dot_double(const float* a, const float* b, int64_t n);
inline double dot_double(const double* a, const double* b, int64_t n) {
  return dot_double_lanes(a, b, n);
}

}  // namespace nanogpt
