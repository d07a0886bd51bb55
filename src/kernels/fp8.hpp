// FP8 rounding for the CPU version of the speedrun's FP8 lm_head.
//
// E4M3 is the "fn" variant (torch.float8_e4m3fn): bias 7, 3 mantissa bits, no infinities,
// NaN only at S.1111.111, largest finite 448, smallest subnormal 2^-9.
// E5M2 is IEEE-like (torch.float8_e5m2): bias 15, 2 mantissa bits, inf and NaN, largest finite
// 57344, smallest subnormal 2^-16.
//
// Rounding (kernels/minifloat.hpp) is to nearest, ties to even, and SATURATES: a finite value
// beyond the range becomes ±max, and so does ±inf. The reference clamps to ±max before
// `x.to(float8_*)`, which gives exactly this for finite inputs; torch's own cast without the
// clamp would produce NaN (E4M3) or inf (E5M2) instead. Saturating inf as well keeps one
// overflowing logit from poisoning the matmul with NaN (inf·0) and matches what the clamp does
// to inf. NaN encodes as 0x7F with the input's sign; the sign of zero is preserved.
#pragma once

#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>

#include "kernels/minifloat.hpp"

namespace nanogpt {

namespace fp8_detail {

using minifloat::kF32Inf;
using minifloat::kF32QuietNan;
inline constexpr uint8_t kNanCode = 0x7f;  // a NaN in both formats

using E4M3 = minifloat::Format<8, 3, 7, 0x43E00000u, kNanCode>;   // 448 = 1.75 * 2^8
using E5M2 = minifloat::Format<8, 2, 15, 0x47600000u, kNanCode>;  // 57344 = 1.75 * 2^15

constexpr float decode_e4m3(uint8_t code) {
  const uint32_t sign = static_cast<uint32_t>(code & 0x80u) << 24;
  const uint32_t exponent = (code >> 3) & 0xfu;
  const uint32_t mantissa = code & 0x7u;
  if ((code & 0x7fu) == 0x7fu) return std::bit_cast<float>(sign | kF32QuietNan);
  if (exponent == 0) {
    const float magnitude = static_cast<float>(mantissa) * (1.0f / 512.0f);  // 2^-9 steps
    return std::bit_cast<float>(sign | std::bit_cast<uint32_t>(magnitude));
  }
  return std::bit_cast<float>(sign | ((exponent + 127 - 7) << 23) | (mantissa << 20));
}

constexpr float decode_e5m2(uint8_t code) {
  const uint32_t sign = static_cast<uint32_t>(code & 0x80u) << 24;
  const uint32_t exponent = (code >> 2) & 0x1fu;
  const uint32_t mantissa = code & 0x3u;
  if (exponent == 0x1f)
    return std::bit_cast<float>(sign | (mantissa == 0 ? kF32Inf : kF32QuietNan));
  if (exponent == 0) {
    const float magnitude = static_cast<float>(mantissa) * (1.0f / 65536.0f);  // 2^-16 steps
    return std::bit_cast<float>(sign | std::bit_cast<uint32_t>(magnitude));
  }
  return std::bit_cast<float>(sign | ((exponent + 127 - 15) << 23) | (mantissa << 21));
}

template <float (*Decode)(uint8_t)>
constexpr std::array<float, 256> make_table() {
  std::array<float, 256> t{};
  for (int c = 0; c < 256; ++c) t[c] = Decode(static_cast<uint8_t>(c));
  return t;
}

inline constexpr std::array<float, 256> kE4M3Values = make_table<decode_e4m3>();
inline constexpr std::array<float, 256> kE5M2Values = make_table<decode_e5m2>();

}  // namespace fp8_detail

inline constexpr float kE4M3Max = 448.0f;
inline constexpr float kE5M2Max = 57344.0f;

inline uint8_t float_to_e4m3(float x) {
  return minifloat::encode<fp8_detail::E4M3>(x);
}
inline float e4m3_to_float(uint8_t code) {
  return fp8_detail::kE4M3Values[code];
}
inline uint8_t float_to_e5m2(float x) {
  return minifloat::encode<fp8_detail::E5M2>(x);
}
inline float e5m2_to_float(uint8_t code) {
  return fp8_detail::kE5M2Values[code];
}

// e4m3_to_float(float_to_e4m3(x)) without the round trip through the code.
inline float round_to_e4m3(float x) {
  return minifloat::round<fp8_detail::E4M3>(x);
}
inline float round_to_e5m2(float x) {
  return minifloat::round<fp8_detail::E5M2>(x);
}

// out[i] = round_to_e4m3(x[i] * inv_scale): the values the FP8 matmul would see, kept in
// float32 because the CPU path multiplies in float32. `out` may be the same array as `x`.
void quantize_e4m3(const float* x, float inv_scale, float* out, size_t n);
void quantize_e5m2(const float* x, float inv_scale, float* out, size_t n);

}  // namespace nanogpt
