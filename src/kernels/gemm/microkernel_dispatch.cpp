// Which kernel runs: the best one at or below the NANOGPT_ISA cap (isa.hpp).
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/autotune.hpp"
#include "kernels/gemm/blocking.hpp"
#include "kernels/gemm/driver.hpp"
#include "kernels/gemm/microkernel.hpp"
#include "runtime/thread_pool.hpp"

namespace nanogpt {

namespace {

// The kernel table: every micro-kernel, in order of preference within a level (fp32 before
// native bf16, whose choice the autotuner makes below). Adding a kernel is adding its line.
constexpr MicroKernel (*kKernelTable[])() = {
    microkernel_scalar,      microkernel_avx2, microkernel_avx512,
    microkernel_avx512_bf16, microkernel_amx,
};

bool runnable(const MicroKernel& k) {
  return k.runnable == nullptr || k.runnable();
}

// The entries this CPU can run, in table order.
std::vector<MicroKernel> runnable_kernels() {
  std::vector<MicroKernel> out;
  for (const auto make : kKernelTable) {
    MicroKernel k = make();
    if (runnable(k)) out.push_back(k);
  }
  return out;
}

// Where several kernels of one level compute bf16 products, e.g. at the avx512 level the
// AVX512-BF16 dot-product kernel and the fp32 FMA kernel on operands rounded to bf16 as they
// are packed (bf16 products are exact in fp32, so both sum the same products), which is faster
// depends on the CPU. On the Xeon this was measured on (KVM, family 6 model 207, no AMX
// exposed) VDPBF16PS sustains 1.3 instructions/ns per core against 5.4 for VFMADD231PS, i.e. 82
// against 170 GFLOP/s, so the FMA kernel is twice as fast; elsewhere the dot product may win.
// The autotuner times them once per CPU on a product that fits in cache, single-threaded, and
// caches the choice; without tuning (NANOGPT_AUTOTUNE=0) it is the first in table order (the
// fp32 kernel, never slower than fp32).
MicroKernel bf16_choice(IsaLevel level, const std::vector<MicroKernel>& candidates) {
  if (candidates.size() == 1) return candidates.front();
  std::vector<std::string> names;
  for (const MicroKernel& k : candidates) names.push_back(k.isa);
  TuneKey key;
  key.op = "bf16_products_kernel";
  key.M = 192;
  key.N = 256;
  key.K = 512;
  key.dtype = "bf16";
  key.isa = isa_name(level);
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
        3);
  });
  return candidates[chosen < candidates.size() ? chosen : 0];
}

}  // namespace

MicroKernel fp32_microkernel_for(IsaLevel cap) {
  const std::vector<MicroKernel> kernels = runnable_kernels();
  for (auto k = kernels.rbegin(); k != kernels.rend(); ++k) {
    if (!k->bf16_products && k->level <= cap) return *k;
  }
  throw std::logic_error("the kernel table has no fp32 kernel every CPU can run");
}

// The kernels of the best level at or below the cap; every kernel takes operands rounded to
// bf16 (fp32 ones as they are packed).
MicroKernel bf16_microkernel_for(IsaLevel cap) {
  const std::vector<MicroKernel> kernels = runnable_kernels();
  IsaLevel best = IsaLevel::kScalar;
  for (const MicroKernel& k : kernels) {
    if (k.level <= cap && k.level > best) best = k.level;
  }
  std::vector<MicroKernel> candidates;
  for (const MicroKernel& k : kernels) {
    if (k.level == best) candidates.push_back(k);
  }
  return bf16_choice(best, candidates);
}

std::vector<MicroKernel> available_microkernels() {
  std::vector<MicroKernel> out;
  for (const MicroKernel& k : runnable_kernels()) {
    if (!k.bf16_products) out.push_back(k);
  }
  return out;
}

std::vector<MicroKernel> available_bf16_microkernels() {
  std::vector<MicroKernel> out = available_microkernels();
  for (const MicroKernel& k : runnable_kernels()) {
    if (k.bf16_products) out.push_back(k);
  }
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
