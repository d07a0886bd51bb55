// What the host gives the GEMM micro-kernel right now: one thread calling it on an L1-resident
// pair of packed panels, timed in short windows.
//
// Why a probe rather than a constant: on the KVM Xeon with AMX this project is measured on, the
// AMX kernel's rate was seen to flip between ~1.9 TFLOP/s and ~0.6 TFLOP/s per thread from one
// second to the next with nothing else running in the guest (bench/README.md, 2026-11-28), and a
// ratio to a peer is only meaningful if both ran in the same state. Benchmarks print this beside
// their figures (`nanogpt bench kernel`, `nanogpt bench train`, gemm_call_cost).
#pragma once

#include <cstdint>

#include "kernels/gemm/microkernel.hpp"

namespace nanogpt {

struct KernelRate {
  const char* isa = "";  // the kernel's name (MicroKernel::isa)
  int64_t windows = 0;   // windows timed
  // GFLOP/s per thread over the windows: the slowest, the median and the fastest.
  double min_gflops = 0, median_gflops = 0, max_gflops = 0;
};

// Times `kernel` for about total_seconds in windows of about window_seconds (each a whole number
// of calls of kc = 256, at least one call; at least three windows). Throws InputError unless
// 0 < window_seconds <= total_seconds <= 60.
KernelRate measure_kernel_rate(const MicroKernel& kernel, double total_seconds,
                               double window_seconds = 0.01);

}  // namespace nanogpt
