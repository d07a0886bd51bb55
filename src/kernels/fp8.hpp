// FP8 rounding for the CPU version of the speedrun's FP8 lm_head.
//
// E4M3 is the "fn" variant (torch.float8_e4m3fn): bias 7, 3 mantissa bits, no infinities,
// NaN only at S.1111.111, largest finite 448, smallest subnormal 2^-9.
// E5M2 is IEEE-like (torch.float8_e5m2): bias 15, 2 mantissa bits, inf and NaN, largest finite
// 57344, smallest subnormal 2^-16.
//
// Encoding rounds to nearest, ties to even, and SATURATES: a finite value beyond the range
// becomes ±max, and so does ±inf. The reference clamps to ±max before `x.to(float8_*)`, which
// gives exactly this for finite inputs; torch's own cast without the clamp would produce NaN
// (E4M3) or inf (E5M2) instead. Saturating inf as well keeps one overflowing logit from
// poisoning the matmul with NaN (inf·0) and matches what the clamp does to inf.
// NaN encodes as 0x7F with the input's sign; the sign of zero is preserved.
//
// The scalar functions are inline so loops elsewhere can vectorize them.
#pragma once

#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>

namespace nanogpt {

namespace fp8_detail {

template <int kMantissaBits, int kBias, uint32_t kMaxFiniteBits>
struct Format {
  static constexpr int kDroppedBits = 23 - kMantissaBits;
  static constexpr uint32_t kMaxBits = kMaxFiniteBits;  // float32 bits of the largest finite
  static constexpr uint32_t kMinNormalBits = static_cast<uint32_t>(127 + 1 - kBias) << 23;
  // Rebias an fp32 exponent field to this format's.
  static constexpr uint32_t kRebias = static_cast<uint32_t>(127 - kBias) << 23;
  // A float whose ulp is the smallest subnormal, 2^(1 - bias - mantissa_bits): adding it
  // to a value below the normal range makes the FPU round that value onto the subnormal grid
  // (ties to even included), and the code is the difference of the bit patterns.
  static constexpr uint32_t kMagicBits = static_cast<uint32_t>(127 + 23 + 1 - kBias - kMantissaBits)
                                         << 23;
  static constexpr uint32_t kHalfUlpMinusOne = (1u << (kDroppedBits - 1)) - 1;
  static constexpr uint32_t kDroppedMask = (1u << kDroppedBits) - 1;
};

using E4M3 = Format<3, 7, 0x43E00000u>;   // 448 = 1.75 * 2^8
using E5M2 = Format<2, 15, 0x47600000u>;  // 57344 = 1.75 * 2^15

inline constexpr uint32_t kF32AbsMask = 0x7fffffffu;
inline constexpr uint32_t kF32Inf = 0x7f800000u;
inline constexpr uint32_t kF32QuietNan = 0x7fc00000u;
inline constexpr uint8_t kNanCode = 0x7f;  // a NaN in both formats

// All-ones if `condition`, else zero. Selecting with masks instead of ?: keeps GCC from
// turning the selects back into branches (it will not speculate a float add under the default
// -ftrapping-math), which would stop the bulk loops from vectorizing.
inline uint32_t mask_if(bool condition) {
  return 0u - static_cast<uint32_t>(condition);
}

inline uint32_t select(uint32_t mask, uint32_t if_set, uint32_t if_clear) {
  return (if_set & mask) | (if_clear & ~mask);
}

// Both branches are computed and one selected, so the loop body has no branches and
// vectorizes; the unselected branch may wrap around, which is harmless for uint32_t.
template <class F>
inline uint8_t encode(float x) {
  const uint32_t u = std::bit_cast<uint32_t>(x);
  const uint32_t sign = (u >> 24) & 0x80u;
  uint32_t a = u & kF32AbsMask;
  const bool nan = a > kF32Inf;
  // Saturate; for non-negative floats, bit order is value order.
  a = select(mask_if(a < F::kMaxBits), a, F::kMaxBits);
  const uint32_t subnormal =
      std::bit_cast<uint32_t>(std::bit_cast<float>(a) + std::bit_cast<float>(F::kMagicBits)) -
      F::kMagicBits;
  const uint32_t normal =
      (a - F::kRebias + F::kHalfUlpMinusOne + ((a >> F::kDroppedBits) & 1u)) >> F::kDroppedBits;
  uint32_t code = select(mask_if(a < F::kMinNormalBits), subnormal, normal);
  code = select(mask_if(nan), kNanCode, code);
  return static_cast<uint8_t>(code | sign);
}

// Same rounding as encode(), but returns the value of the code as a float32 directly: rounding
// the fp32 mantissa in place avoids a table lookup (a gather) in vectorized loops.
template <class F>
inline float round(float x) {
  const uint32_t u = std::bit_cast<uint32_t>(x);
  const uint32_t sign = u & ~kF32AbsMask;
  uint32_t a = u & kF32AbsMask;
  const bool nan = a > kF32Inf;
  a = select(mask_if(a < F::kMaxBits), a, F::kMaxBits);
  const float magic = std::bit_cast<float>(F::kMagicBits);
  // The sum lies in [magic, 2 * magic), so subtracting magic again is exact.
  const uint32_t subnormal = std::bit_cast<uint32_t>((std::bit_cast<float>(a) + magic) - magic);
  const uint32_t normal =
      (a + F::kHalfUlpMinusOne + ((a >> F::kDroppedBits) & 1u)) & ~F::kDroppedMask;
  uint32_t r = select(mask_if(a < F::kMinNormalBits), subnormal, normal);
  r = select(mask_if(nan), kF32QuietNan, r);
  return std::bit_cast<float>(r | sign);
}

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
  return fp8_detail::encode<fp8_detail::E4M3>(x);
}
inline float e4m3_to_float(uint8_t code) {
  return fp8_detail::kE4M3Values[code];
}
inline uint8_t float_to_e5m2(float x) {
  return fp8_detail::encode<fp8_detail::E5M2>(x);
}
inline float e5m2_to_float(uint8_t code) {
  return fp8_detail::kE5M2Values[code];
}

// e4m3_to_float(float_to_e4m3(x)) without the round trip through the code.
inline float round_to_e4m3(float x) {
  return fp8_detail::round<fp8_detail::E4M3>(x);
}
inline float round_to_e5m2(float x) {
  return fp8_detail::round<fp8_detail::E5M2>(x);
}

// out[i] = round_to_e4m3(x[i] * inv_scale): the values the FP8 matmul would see, kept in
// float32 because the CPU path multiplies in float32. `out` may be the same array as `x`.
void quantize_e4m3(const float* x, float inv_scale, float* out, size_t n);
void quantize_e5m2(const float* x, float inv_scale, float* out, size_t n);

}  // namespace nanogpt
