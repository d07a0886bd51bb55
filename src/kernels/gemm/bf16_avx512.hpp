// fp32 → bf16 rounding on 16 lanes of AVX-512 in integer arithmetic: the vector form of the
// rounding defined in kernels/bf16.hpp (the same three steps and constants as to_bf16_bits),
// for CPUs without VCVTNE2PS2BF16, which gives the same bits; and the widening back.
#pragma once

#include "kernels/bf16.hpp"
#include "kernels/target.hpp"

namespace nanogpt {

// c in every 32-bit lane.
NANOGPT_TARGET_AVX512 NANOGPT_ALWAYS_INLINE __m512i bf16_lanes(uint32_t c) {
  return _mm512_set1_epi32(static_cast<int>(c));
}

// Each lane's high half becomes the bf16 of the fp32 in it (nearest even; NaN stays a NaN,
// quieted; a denormal becomes a zero of its sign); the low half is left over from the addition.
NANOGPT_TARGET_AVX512 NANOGPT_ALWAYS_INLINE __m512i bf16_round_hi(__m512i u) {
  using namespace bf16_rounding;
  const __mmask16 denormal = _mm512_testn_epi32_mask(u, bf16_lanes(kExponent));
  u = _mm512_mask_and_epi32(u, denormal, u, bf16_lanes(kSign));  // 1
  const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), bf16_lanes(1));
  const __m512i rounded =
      _mm512_add_epi32(u, _mm512_add_epi32(lsb, bf16_lanes(kHalfUlpMinusOne)));  // 2
  const __mmask16 nan =
      _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, bf16_lanes(kMagnitude)), bf16_lanes(kExponent));
  return _mm512_mask_or_epi32(rounded, nan, u, bf16_lanes(kQuiet));  // 3
}

// 16 bf16 values widened to exact fp32 lanes (each value the high half of its lane); lanes
// outside m are +0 and their memory is not read.
NANOGPT_TARGET_AVX512BW NANOGPT_ALWAYS_INLINE __m512i bf16_load_hi(const bf16* p, __mmask16 m) {
  return _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, p)), 16);
}

}  // namespace nanogpt
