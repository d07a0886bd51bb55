// 8×32 with AVX-512: 16 zmm accumulators, 2 B loads and a broadcast per k.
#include <immintrin.h>

#include "kernels/gemm/microkernel.hpp"

namespace nanogpt {

namespace {

constexpr int64_t kMR = 8, kNR = 32;

__attribute__((target("avx512f"))) void kernel(int64_t kc, const float* a, const float* b,
                                               float* out, int64_t ldc, float alpha, float beta) {
  __m512 c[kMR][2];
#pragma GCC unroll 8
  for (int r = 0; r < kMR; ++r) c[r][0] = c[r][1] = _mm512_setzero_ps();
  for (int64_t k = 0; k < kc; ++k) {
    const __m512 b0 = _mm512_loadu_ps(b + k * kNR);
    const __m512 b1 = _mm512_loadu_ps(b + k * kNR + 16);
#pragma GCC unroll 8
    for (int r = 0; r < kMR; ++r) {
      const __m512 ar = _mm512_set1_ps(a[k * kMR + r]);
      c[r][0] = _mm512_fmadd_ps(ar, b0, c[r][0]);
      c[r][1] = _mm512_fmadd_ps(ar, b1, c[r][1]);
    }
  }
  const __m512 va = _mm512_set1_ps(alpha), vb = _mm512_set1_ps(beta);
#pragma GCC unroll 8
  for (int r = 0; r < kMR; ++r) {
    float* o = out + r * ldc;
    __m512 r0 = _mm512_mul_ps(va, c[r][0]), r1 = _mm512_mul_ps(va, c[r][1]);
    if (beta != 0.0f) {
      r0 = _mm512_fmadd_ps(vb, _mm512_loadu_ps(o), r0);
      r1 = _mm512_fmadd_ps(vb, _mm512_loadu_ps(o + 16), r1);
    }
    _mm512_storeu_ps(o, r0);
    _mm512_storeu_ps(o + 16, r1);
  }
}

}  // namespace

MicroKernel microkernel_avx512() {
  return {"avx512", kMR, kNR, kernel};
}

}  // namespace nanogpt
