#include "kernels/fp8.hpp"

namespace nanogpt {

// Kept out of line so the loops are compiled (and vectorized) once, with the library's flags.
// The product is formed before rounding so the result is that of a separate multiply; the
// rounding step only sees it through integer operations, so it cannot be fused into an FMA.

void quantize_e4m3(const float* x, float inv_scale, float* out, size_t n) {
  for (size_t i = 0; i < n; ++i) out[i] = minifloat::round<fp8_detail::E4M3>(x[i] * inv_scale);
}

void quantize_e5m2(const float* x, float inv_scale, float* out, size_t n) {
  for (size_t i = 0; i < n; ++i) out[i] = minifloat::round<fp8_detail::E5M2>(x[i] * inv_scale);
}

}  // namespace nanogpt
