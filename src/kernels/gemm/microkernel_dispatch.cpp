// Which kernel runs: the best one at or below the NANOGPT_ISA cap (isa.hpp).
#include <random>
#include <string>
#include <vector>

#include "kernels/autotune.hpp"
#include "kernels/gemm/blocking.hpp"
#include "kernels/gemm/driver.hpp"
#include "kernels/gemm/microkernel.hpp"
#include "runtime/cpu_info.hpp"
#include "runtime/thread_pool.hpp"

namespace nanogpt {

namespace {

bool has_avx512_bf16() {
  const CpuInfo& cpu = cpu_info();
  return cpu.avx512_bf16 && cpu.avx512bw && isa_available(IsaLevel::kAvx512);
}

// At the avx512 level two kernels compute bf16 products (exact in fp32) with fp32 sums: the
// AVX512-BF16 dot-product kernel, and the fp32 FMA kernel on operands rounded to bf16 as they
// are packed. Which is faster depends on the CPU. On the Xeon this was measured on (KVM, family
// 6 model 207, no AMX exposed) VDPBF16PS sustains 1.3 instructions/ns per core against 5.4 for
// VFMADD231PS, i.e. 82 against 170 GFLOP/s, so the FMA kernel is twice as fast; elsewhere the
// dot product may win. The autotuner times both once per CPU on a product that fits in cache,
// single-threaded, and caches the choice; without tuning (NANOGPT_AUTOTUNE=0) it is the FMA
// kernel, never slower than fp32.
MicroKernel avx512_bf16_choice() {
  const std::vector<MicroKernel> candidates = {microkernel_avx512(), microkernel_avx512_bf16()};
  std::vector<std::string> names;
  for (const MicroKernel& k : candidates) names.push_back(k.isa);
  TuneKey key;
  key.op = "bf16_products_kernel";
  key.M = 192;
  key.N = 256;
  key.K = 512;
  key.dtype = "bf16";
  key.isa = "avx512";
  const size_t chosen = autotune(key, names, 0, [&](size_t i) {
    std::mt19937 rng(1);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    std::vector<float> a(static_cast<size_t>(key.M * key.K)), b(static_cast<size_t>(key.N * key.K));
    std::vector<float> c(static_cast<size_t>(key.M * key.N));
    for (float& x : a) x = u(rng);
    for (float& x : b) x = u(rng);
    ThreadPool one(1);
    ThreadPool::Use use(one);
    const MicroKernel& k = candidates[i];
    const GemmBlocking blocking = default_blocking(k, key.M, key.N, key.K, 1);
    return time_best_of(
        [&] {
          gemm_run(k, blocking, PackSource::kF32ToBf16, Trans::kNo, Trans::kYes, key.M, key.N,
                   key.K, 1.0f, a.data(), key.K, b.data(), key.K, 0.0f, c.data(), key.N, nullptr);
        },
        5);
  });
  return candidates[chosen < candidates.size() ? chosen : 0];
}

}  // namespace

MicroKernel fp32_microkernel_for(IsaLevel cap) {
  if (cap >= IsaLevel::kAvx512 && isa_available(IsaLevel::kAvx512)) return microkernel_avx512();
  if (cap >= IsaLevel::kAvx2 && isa_available(IsaLevel::kAvx2)) return microkernel_avx2();
  return microkernel_scalar();
}

MicroKernel bf16_microkernel_for(IsaLevel cap) {
  if (cap >= IsaLevel::kAmx && isa_available(IsaLevel::kAmx)) return microkernel_amx();
  if (cap >= IsaLevel::kAvx512 && has_avx512_bf16()) return avx512_bf16_choice();
  return fp32_microkernel_for(cap);
}

std::vector<MicroKernel> available_microkernels() {
  std::vector<MicroKernel> out = {microkernel_scalar()};
  if (isa_available(IsaLevel::kAvx2)) out.push_back(microkernel_avx2());
  if (isa_available(IsaLevel::kAvx512)) out.push_back(microkernel_avx512());
  return out;
}

std::vector<MicroKernel> available_bf16_microkernels() {
  std::vector<MicroKernel> out = available_microkernels();
  if (has_avx512_bf16()) out.push_back(microkernel_avx512_bf16());
  if (isa_available(IsaLevel::kAmx)) out.push_back(microkernel_amx());
  return out;
}

const MicroKernel& active_microkernel() {
  static const MicroKernel chosen = fp32_microkernel_for(isa_cap());
  return chosen;
}

const MicroKernel& active_bf16_microkernel() {
  static const MicroKernel chosen = bf16_microkernel_for(isa_cap());
  return chosen;
}

}  // namespace nanogpt
