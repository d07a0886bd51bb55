// 6×16 with AVX2 + FMA: 12 ymm accumulators, 2 B loads and a broadcast per k — enough
// independent FMAs to cover their latency on two ports.
#include <immintrin.h>

#include "kernels/gemm/microkernel.hpp"

namespace nanogpt {

namespace {

constexpr int64_t kMR = 6, kNR = 16;

__attribute__((target("avx2,fma"))) void kernel(int64_t kc, const float* a, const float* b,
                                                float* acc) {
  __m256 c[kMR][2];
#pragma GCC unroll 6
  for (int r = 0; r < kMR; ++r) c[r][0] = c[r][1] = _mm256_setzero_ps();
  for (int64_t k = 0; k < kc; ++k) {
    const __m256 b0 = _mm256_loadu_ps(b + k * kNR);
    const __m256 b1 = _mm256_loadu_ps(b + k * kNR + 8);
#pragma GCC unroll 6
    for (int r = 0; r < kMR; ++r) {
      const __m256 ar = _mm256_broadcast_ss(a + k * kMR + r);
      c[r][0] = _mm256_fmadd_ps(ar, b0, c[r][0]);
      c[r][1] = _mm256_fmadd_ps(ar, b1, c[r][1]);
    }
  }
#pragma GCC unroll 6
  for (int r = 0; r < kMR; ++r) {
    _mm256_storeu_ps(acc + r * kNR, c[r][0]);
    _mm256_storeu_ps(acc + r * kNR + 8, c[r][1]);
  }
}

}  // namespace

MicroKernel microkernel_avx2() {
  return {"avx2", kMR, kNR, kernel};
}

}  // namespace nanogpt
