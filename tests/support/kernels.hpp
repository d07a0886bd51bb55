// The GEMM micro-kernels the tests run: every one this CPU can run and, where the CPU has no
// AMX (or no permission for it), the AMX kernel's code on a software model of the tile unit, so
// its packers, layouts and tile addressing are checked on every machine with AVX512-BF16.
#pragma once

#include <cstdint>
#include <cstring>
#include <random>
#include <utility>
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

// The same and, where the CPU has the tiles too, their software model: for tests of a code path
// the model has its own copy of (AMX's in-place A, sums stored into C), which the model then
// checks beside the hardware.
inline std::vector<MicroKernel> bf16_microkernels_and_tile_model() {
  std::vector<MicroKernel> out = bf16_microkernels_under_test();
  const MicroKernel emulated = microkernel_amx_emulated();
  if (isa_available(IsaLevel::kAmx) && emulated.runnable()) out.push_back(emulated);
  return out;
}

// Every kernel a GEMM test runs, with the source it reads: each fp32 kernel on fp32, each bf16
// kernel under test on fp32 rounded as it packs.
inline std::vector<std::pair<MicroKernel, PackSource>> every_gemm_kernel() {
  std::vector<std::pair<MicroKernel, PackSource>> out;
  for (const MicroKernel& k : available_microkernels()) out.emplace_back(k, PackSource::kF32);
  for (const MicroKernel& k : bf16_microkernels_under_test())
    out.emplace_back(k, PackSource::kF32ToBf16);
  return out;
}

// n values uniform in [-1, 1) from a seeded generator: random, never zeros.
inline std::vector<float> random_values(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = u(rng);
  return v;
}

inline bool same_bits(const std::vector<float>& x, const std::vector<float>& y) {
  return x.size() == y.size() && std::memcmp(x.data(), y.data(), x.size() * sizeof(float)) == 0;
}

}  // namespace nanogpt
