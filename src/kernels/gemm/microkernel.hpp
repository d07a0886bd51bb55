// GEMM micro-kernels: C[MR×NR] = alpha·Σ_k a_k ⊗ b_k + beta·C over one packed A micro-panel
// (kc × MR, k-major) and one packed B micro-panel (kc × NR, k-major), C row-major with ldc.
// beta == 0 never reads C. One implementation per ISA, each
// in its own file, compiled with that ISA's target attribute and chosen at run time.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace nanogpt {

using MicroKernelFn = void (*)(int64_t kc, const float* a, const float* b, float* c, int64_t ldc,
                               float alpha, float beta);

struct MicroKernel {
  const char* isa;  // "scalar", "avx2", "avx512"
  int64_t mr, nr;
  MicroKernelFn fn;
};

MicroKernel microkernel_scalar();
MicroKernel microkernel_avx2();
MicroKernel microkernel_avx512();

// The best kernel this CPU supports, or the one NANOGPT_ISA names (an error if the CPU
// lacks it).
const MicroKernel& active_microkernel();
// For tests: every kernel this CPU can run.
std::vector<MicroKernel> available_microkernels();

}  // namespace nanogpt
