// bfloat16: the top 16 bits of an fp32. Conversions round to nearest even and keep NaN a
// (quiet) NaN, and flush fp32 denormals to a zero of their sign: exactly what the hardware's
// VCVTNE2PS2BF16 does (checked on all 2^32 inputs), so the packers can use that one
// instruction where the CPU has it and integer arithmetic elsewhere, with the same bits.
#pragma once

#include <cstdint>
#include <cstring>

namespace nanogpt {

struct bf16 {
  uint16_t bits;
};

// The bits of to_bf16(f). Branch-free (the NaN case is a select), so loops over it vectorize.
inline uint16_t to_bf16_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  u = (u & 0x7F800000u) == 0 ? (u & 0x80000000u) : u;  // denormal: signed zero
  const uint32_t rounded = (u + 0x7FFFu + ((u >> 16) & 1u)) >> 16;
  const uint32_t quiet_nan = (u >> 16) | 0x0040u;
  return static_cast<uint16_t>((u & 0x7FFFFFFFu) > 0x7F800000u ? quiet_nan : rounded);
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

// f rounded to the nearest bf16, as an fp32.
inline float round_to_bf16(float f) {
  return to_float(to_bf16(f));
}

}  // namespace nanogpt
