// exp(x) in fp32 without libm, for the softmax loops of attention and the fused loss: written
// without calls or branches so the loops over it vectorize (libm's expf does not without
// -ffast-math, under which GCC would call libmvec).
//
// Cephes' expf: x = n·ln 2 + r with n = round(x / ln 2) and |r| <= ln 2 / 2, then
// e^r by a degree-7 minimax polynomial and 2^n by building the exponent bits. Within 2 ulp (seen:
// 0.99) of e^x on [-87, 88] (tests/test_exp_approx.cpp checks every 509th float there, and densely
// near the ends). Edges:
//   - below -87, including -inf: exactly 0 (e^-87 ≈ 1.6e-38; a softmax weight that small is
//     nothing against the row's maximum of 1, and masked scores are -inf);
//   - above 88, including +inf: saturates at the value at 88 (≈ 1.65e38, finite);
//   - NaN: NaN.
#pragma once

#include <algorithm>
#include <bit>
#include <cstdint>

namespace nanogpt {

inline float exp_approx(float x) {
  // std::max/std::min return their first argument when a comparison fails, so NaN stays NaN.
  const float clamped = std::min(std::max(x, -87.0f), 88.0f);
  // Adding 1.5·2^23 rounds to an integer and leaves it in the low mantissa bits: no floor or
  // rint call that SSE2 cannot inline, and no float-to-int conversion of a NaN.
  const float kShift = 12582912.0f;
  const float shifted = clamped * 1.44269504088896341f + kShift;
  const float n = shifted - kShift;
  const int32_t ni = std::bit_cast<int32_t>(shifted) - std::bit_cast<int32_t>(kShift);
  // ln 2 in two parts; n·0.693359375 is exact for |n| <= 128, so r is exact to float precision.
  float r = clamped - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  float poly = 1.9875691500e-4f;
  poly = poly * r + 1.3981999507e-3f;
  poly = poly * r + 8.3334519073e-3f;
  poly = poly * r + 4.1665795894e-2f;
  poly = poly * r + 1.6666665459e-1f;
  poly = poly * r + 5.0000001201e-1f;
  const float er = poly * (r * r) + r + 1.0f;
  const float result = er * std::bit_cast<float>((ni + 127) << 23);
  return x < -87.0f ? 0.0f : result;
}

}  // namespace nanogpt
