// Which kernel runs: the best one at or below the NANOGPT_ISA cap (isa.hpp).
#include "kernels/gemm/microkernel.hpp"
#include "runtime/cpu_info.hpp"

namespace nanogpt {

namespace {

bool has_avx512_bf16() {
  const CpuInfo& cpu = cpu_info();
  return cpu.avx512_bf16 && cpu.avx512bw && isa_available(IsaLevel::kAvx512);
}

}  // namespace

MicroKernel fp32_microkernel_for(IsaLevel cap) {
  if (cap >= IsaLevel::kAvx512 && isa_available(IsaLevel::kAvx512)) return microkernel_avx512();
  if (cap >= IsaLevel::kAvx2 && isa_available(IsaLevel::kAvx2)) return microkernel_avx2();
  return microkernel_scalar();
}

MicroKernel bf16_microkernel_for(IsaLevel cap) {
  if (cap >= IsaLevel::kAmx && isa_available(IsaLevel::kAmx)) return microkernel_amx();
  if (cap >= IsaLevel::kAvx512 && has_avx512_bf16()) return microkernel_avx512_bf16();
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
