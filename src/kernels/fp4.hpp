// FP4 E2M1 (the element format of OCP MXFP4 and of Streaming DiLoCo's outer gradients): a sign,
// 2 exponent bits with bias 1 and 1 mantissa bit, so the magnitudes are 0, 0.5, 1, 1.5, 2, 3,
// 4 and 6 (0.5 is the one subnormal). No infinities and no NaN: rounding is to nearest, ties
// to even, saturating at ±6 (kernels/minifloat.hpp); ±inf saturate too. A NaN has no code:
// the caller must not encode one (outer_grad_codec refuses non-finite input). Codes are 4 bits
// in the low half of a byte: sign in bit 3.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

#include "kernels/minifloat.hpp"

namespace nanogpt {

namespace fp4_detail {
// NaN would take the largest magnitude's code; callers never pass one (see above).
using E2M1 = minifloat::Format<4, 1, 1, 0x40C00000u /* 6.0 */, 0x7>;

// The format's definition: (-1)^s · 2^(e-1) · (1 + m/2), or (-1)^s · m/2 when e = 0.
constexpr float decode_e2m1(uint8_t code) {
  const float sign = (code & 0x8u) != 0 ? -1.0f : 1.0f;
  const int exponent = (code >> 1) & 0x3;
  const int mantissa = code & 0x1;
  if (exponent == 0) return sign * 0.5f * static_cast<float>(mantissa);
  return sign * static_cast<float>(1 << (exponent - 1)) *
         (1.0f + 0.5f * static_cast<float>(mantissa));
}

constexpr std::array<float, 16> make_table() {
  std::array<float, 16> t{};
  for (int c = 0; c < 16; ++c)
    t[static_cast<std::size_t>(c)] = decode_e2m1(static_cast<uint8_t>(c));
  return t;
}

inline constexpr std::array<float, 16> kE2M1Values = make_table();
}  // namespace fp4_detail

inline constexpr float kE2M1Max = 6.0f;

inline uint8_t float_to_e2m1(float x) {
  return minifloat::encode<fp4_detail::E2M1>(x);
}
inline float e2m1_to_float(uint8_t code) {
  return fp4_detail::kE2M1Values[code & 0xfu];
}
// e2m1_to_float(float_to_e2m1(x)) without the round trip through the code.
inline float round_to_e2m1(float x) {
  return minifloat::round<fp4_detail::E2M1>(x);
}

}  // namespace nanogpt
