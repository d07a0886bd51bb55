// bfloat16: the top 16 bits of an fp32. Conversions round to nearest even and keep NaN a
// (quiet) NaN, and flush fp32 denormals to a zero of their sign: exactly what the hardware's
// VCVTNE2PS2BF16 does (checked on all 2^32 inputs), so the packers can use that one
// instruction where the CPU has it and integer arithmetic elsewhere, with the same bits.
//
// The rounding is defined once, as three steps on the fp32's bits u, and written in two forms:
// to_bf16_bits below (one value) and bf16_round_hi in gemm/bf16_avx512.hpp (16 lanes of
// AVX-512), both from the constants of bf16_rounding:
//   1. a denormal (no exponent bits) becomes a zero of its sign: u = u & kSign;
//   2. nearest even: u + kHalfUlpMinusOne + (bit 16 of u), of which the top half is the result
//      (a carry out of the mantissa gives the next binade, or infinity past the largest);
//   3. a NaN (|u| > kExponent) is instead its own top half with the quiet bit set (u | kQuiet),
//      so a NaN whose payload sits in the low half does not become an infinity.
// tests/test_bf16.cpp checks the two forms and the instruction against each other, bit for
// bit, on every special class and on random bit patterns.
#pragma once

#include <cstdint>
#include <cstring>

namespace nanogpt {

struct bf16 {
  uint16_t bits;
};

namespace bf16_rounding {
inline constexpr uint32_t kSign = 0x80000000u;
inline constexpr uint32_t kExponent = 0x7F800000u;  // also the bits of +infinity
inline constexpr uint32_t kMagnitude = 0x7FFFFFFFu;
inline constexpr uint32_t kHalfUlpMinusOne = 0x7FFFu;
inline constexpr uint32_t kQuiet = 0x00400000u;
}  // namespace bf16_rounding

// The bits of to_bf16(f). Branch-free (the cases are selects), so loops over it vectorize.
inline uint16_t to_bf16_bits(float f) {
  using namespace bf16_rounding;
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  u = (u & kExponent) == 0 ? (u & kSign) : u;                                   // 1
  const uint32_t rounded = u + kHalfUlpMinusOne + ((u >> 16) & 1u);             // 2
  const uint32_t result = (u & kMagnitude) > kExponent ? u | kQuiet : rounded;  // 3
  return static_cast<uint16_t>(result >> 16);
}

inline bf16 to_bf16(float f) {
  return bf16{to_bf16_bits(f)};
}

inline float to_float(bf16 h) {
  uint32_t u = static_cast<uint32_t>(h.bits) << 16;
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

// f rounded to the nearest bf16, as an fp32. Branch-free like to_bf16_bits.
inline float round_to_bf16(float f) {
  return to_float(to_bf16(f));
}

// out[i] = to_bf16(x[i]) for n values: a row stored rounded for the products that read it
// (model/block_ops.hpp, ProductRows). Compiled per ISA (bf16.cpp), the same bits as to_bf16.
void round_to_bf16(const float* x, int64_t n, bf16* out);

// out[i] = to_float(x[i]) for n values: a row stored in bf16 read back as the fp32 it stands for.
inline void widen_to_float(const bf16* x, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = to_float(x[i]);
}

}  // namespace nanogpt
