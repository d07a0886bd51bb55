// exp_approx (kernels/exp_approx.hpp) on 16 lanes of AVX-512, for loops GCC does not compile
// well from the scalar form: under a lane mask (a softmax's hidden keys) it kept every
// operation masked and moved the masks through general registers, ~60 instructions a vector
// where this takes ~25: a 128 × 128 softmax tile of attention in 5.1 µs instead of 9.3 on Zen 5
// (bench/README.md, 2026-12-06). The same operations in the same order as the scalar form, with
// the fused multiply-adds GCC makes of it in the loops' AVX-512 clones when it optimises (-O2
// and above): then the same bits as those clones (tests/test_exp_approx.cpp). An unoptimised
// build fuses nothing in the clones, and the two differ in the last bits (each within 2 ulp).
#pragma once

#include "kernels/target.hpp"

namespace nanogpt {

NANOGPT_TARGET_AVX512 NANOGPT_ALWAYS_INLINE __m512 exp_approx_avx512(__m512 x) {
  // std::max(x, -87) and std::min(·, 88) keep a NaN x: MAXPS and MINPS return their second
  // operand when either is NaN.
  const __m512 clamped =
      _mm512_min_ps(_mm512_set1_ps(88.0f), _mm512_max_ps(_mm512_set1_ps(-87.0f), x));
  const __m512 shift = _mm512_set1_ps(12582912.0f);
  const __m512 shifted = _mm512_fmadd_ps(clamped, _mm512_set1_ps(1.44269504088896341f), shift);
  const __m512 n = _mm512_sub_ps(shifted, shift);
  const __m512i ni = _mm512_sub_epi32(_mm512_castps_si512(shifted), _mm512_castps_si512(shift));
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), clamped);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
  __m512 poly = _mm512_set1_ps(1.9875691500e-4f);
  poly = _mm512_fmadd_ps(poly, r, _mm512_set1_ps(1.3981999507e-3f));
  poly = _mm512_fmadd_ps(poly, r, _mm512_set1_ps(8.3334519073e-3f));
  poly = _mm512_fmadd_ps(poly, r, _mm512_set1_ps(4.1665795894e-2f));
  poly = _mm512_fmadd_ps(poly, r, _mm512_set1_ps(1.6666665459e-1f));
  poly = _mm512_fmadd_ps(poly, r, _mm512_set1_ps(5.0000001201e-1f));
  const __m512 er =
      _mm512_add_ps(_mm512_fmadd_ps(poly, _mm512_mul_ps(r, r), r), _mm512_set1_ps(1.0f));
  const __m512 two_n =
      _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(ni, _mm512_set1_epi32(127)), 23));
  const __mmask16 below = _mm512_cmp_ps_mask(x, _mm512_set1_ps(-87.0f), _CMP_LT_OQ);
  return _mm512_mask_mov_ps(_mm512_mul_ps(er, two_n), below, _mm512_setzero_ps());
}

}  // namespace nanogpt
