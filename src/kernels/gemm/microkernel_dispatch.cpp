#include <cstdlib>
#include <string>

#include "kernels/gemm/microkernel.hpp"
#include "runtime/cpu_info.hpp"
#include "runtime/error.hpp"

namespace nanogpt {

std::vector<MicroKernel> available_microkernels() {
  const CpuInfo& cpu = cpu_info();
  std::vector<MicroKernel> out = {microkernel_scalar()};
  if (cpu.avx2 && cpu.fma) out.push_back(microkernel_avx2());
  if (cpu.avx512f) out.push_back(microkernel_avx512());
  return out;
}

const MicroKernel& active_microkernel() {
  static const MicroKernel chosen = [] {
    std::vector<MicroKernel> all = available_microkernels();
    const char* forced = std::getenv("NANOGPT_ISA");
    if (forced == nullptr || *forced == '\0') return all.back();
    for (const MicroKernel& k : all) {
      if (std::string(forced) == k.isa) return k;
    }
    std::string have;
    for (const MicroKernel& k : all) have += (have.empty() ? "" : ", ") + std::string(k.isa);
    throw InputError("NANOGPT_ISA=" + std::string(forced) +
                     " is not available on this CPU (fp32 GEMM paths here: " + have + ")");
  }();
  return chosen;
}

}  // namespace nanogpt
