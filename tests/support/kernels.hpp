// The GEMM micro-kernels the tests run: every one this CPU can run and, where the CPU has no
// AMX (or no permission for it), the AMX kernel's code on a software model of the tile unit, so
// its packers, layouts and tile addressing are checked on every machine with AVX512-BF16.
#pragma once

#include <vector>

#include "kernels/gemm/isa.hpp"
#include "kernels/gemm/microkernel.hpp"

namespace nanogpt {

inline std::vector<MicroKernel> bf16_microkernels_under_test() {
  std::vector<MicroKernel> out = available_bf16_microkernels();
  const MicroKernel emulated = microkernel_amx_emulated();
  if (!isa_available(IsaLevel::kAmx) && emulated.runnable()) out.push_back(emulated);
  return out;
}

}  // namespace nanogpt
