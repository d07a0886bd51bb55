// 6×16 with AVX2 + FMA: 12 ymm accumulators, 2 B loads and a broadcast per k — enough
// independent FMAs to cover their latency on two ports.
#include <immintrin.h>

#include "kernels/gemm/microkernel.hpp"

namespace nanogpt {

namespace {

constexpr int64_t kMR = 6, kNR = 16;

__attribute__((target("avx2,fma"))) void kernel(int64_t kc, const float* a, const float* b,
                                                float* out, int64_t ldc, float alpha, float beta) {
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
  const __m256 va = _mm256_set1_ps(alpha), vb = _mm256_set1_ps(beta);
#pragma GCC unroll 6
  for (int r = 0; r < kMR; ++r) {
    float* o = out + r * ldc;
    __m256 r0 = _mm256_mul_ps(va, c[r][0]), r1 = _mm256_mul_ps(va, c[r][1]);
    if (beta != 0.0f) {
      r0 = _mm256_fmadd_ps(vb, _mm256_loadu_ps(o), r0);
      r1 = _mm256_fmadd_ps(vb, _mm256_loadu_ps(o + 8), r1);
    }
    _mm256_storeu_ps(o, r0);
    _mm256_storeu_ps(o + 8, r1);
  }
}

}  // namespace

MicroKernel microkernel_avx2() {
  return {"avx2", kMR, kNR, kernel};
}

}  // namespace nanogpt
