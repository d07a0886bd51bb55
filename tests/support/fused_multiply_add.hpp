// Whether this build fuses a·b + c into one rounding in AVX-512 code, as GCC does when it
// optimises at -O2 and above (its widening_mul pass) and not at -O1 (the sanitizer build) or
// -O0. The library and the tests are compiled alike, so this says whether the library's cloned
// loops fused their multiply-adds: tests that compare them with forms spelling the fused
// multiply-adds out (kernels/exp_approx_avx512.hpp) need the same bits only then.
#pragma once

#include <cmath>

#include "kernels/target.hpp"

namespace nanogpt::test {

__attribute__((noinline)) NANOGPT_TARGET_AVX512 inline float multiply_add_as_compiled(float a,
                                                                                      float b,
                                                                                      float c) {
  return a * b + c;
}

inline bool build_fuses_multiply_add() {
  // 1 + 2^-12 squared is 1 + 2^-11 + 2^-24: the last term is lost when a·b is rounded first.
  volatile float a = 1.0f + 0x1p-12f, c = -1.0f;
  return multiply_add_as_compiled(a, a, c) == std::fma(a, a, c);
}

}  // namespace nanogpt::test
