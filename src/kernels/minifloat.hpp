// Rounding of float32 to small floating-point formats (FP8 E4M3/E5M2, FP4 E2M1): one
// definition, parameterised by the format, that fp8.hpp and fp4.hpp instantiate.
//
// Encoding rounds to nearest, ties to even, and SATURATES: a finite value beyond the range
// becomes ±max, and so does ±inf. A NaN becomes the format's NaN code (for formats without a
// NaN, the caller must not pass one: see fp4.hpp). The sign of zero is preserved.
//
// The scalar functions are inline so loops elsewhere can vectorize them.
#pragma once

#include <bit>
#include <cstdint>

namespace nanogpt::minifloat {

// kCodeBits: 8 or 4 (sign, exponent, mantissa). kMaxFiniteBits: the float32 bits of the
// largest finite value. kNanCode: the code of NaN without its sign.
template <int kCodeBits, int kMantissaBits, int kBias, uint32_t kMaxFiniteBits, uint8_t kNan>
struct Format {
  static constexpr int kBits = kCodeBits;
  static constexpr uint8_t kNanCode = kNan;
  static constexpr int kSignShift = 32 - kCodeBits;  // float32 sign bit onto the code's
  static constexpr uint32_t kSignBit = 1u << (kCodeBits - 1);
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

inline constexpr uint32_t kF32AbsMask = 0x7fffffffu;
inline constexpr uint32_t kF32Inf = 0x7f800000u;
inline constexpr uint32_t kF32QuietNan = 0x7fc00000u;

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
  const uint32_t sign = (u >> F::kSignShift) & F::kSignBit;
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
  code = select(mask_if(nan), F::kNanCode, code);
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

}  // namespace nanogpt::minifloat
