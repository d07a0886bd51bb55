// A float's bits and back: tests compare bits where a value must be exact, so that a NaN left in
// place, a signed zero or a last-bit difference is told apart from the value wanted.
#pragma once

#include <bit>
#include <cstdint>

namespace nanogpt::test {

inline uint32_t bits_of(float x) {
  return std::bit_cast<uint32_t>(x);
}

inline float from_bits(uint32_t u) {
  return std::bit_cast<float>(u);
}

}  // namespace nanogpt::test
