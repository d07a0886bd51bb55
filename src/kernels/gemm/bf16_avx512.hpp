// fp32 → bf16 rounding on 16 lanes of AVX-512 in integer arithmetic, bit for bit as to_bf16()
// (and VCVTNE2PS2BF16, for CPUs without it).
#pragma once

#include "kernels/target.hpp"

namespace nanogpt {

// Each lane's high half becomes the bf16 of the fp32 in it (nearest even; NaN stays a NaN,
// quieted; a denormal becomes a zero of its sign); the low half is left over from the addition.
NANOGPT_TARGET_AVX512 NANOGPT_ALWAYS_INLINE __m512i bf16_round_hi(__m512i u) {
  const __mmask16 denormal = _mm512_testn_epi32_mask(u, _mm512_set1_epi32(0x7F800000));
  u = _mm512_mask_and_epi32(u, denormal, u, _mm512_set1_epi32(static_cast<int>(0x80000000u)));
  const __m512i abs = _mm512_and_si512(u, _mm512_set1_epi32(0x7FFFFFFF));
  const __mmask16 nan = _mm512_cmpgt_epu32_mask(abs, _mm512_set1_epi32(0x7F800000));
  const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
  const __m512i rounded = _mm512_add_epi32(u, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7FFF)));
  return _mm512_mask_or_epi32(rounded, nan, u, _mm512_set1_epi32(0x00400000));
}

}  // namespace nanogpt
