// The driver's cache blocking, as a value the autotuner can choose. Every blocking gives the
// same bits: tasks split C into tiles (never K), and a tile's sum over K runs in the same order
// whatever kc is, continued from the fp32 accumulator between K blocks (kc is a multiple of
// the kernel's k step, so zero padding only ever comes at the end of K).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kernels/gemm/microkernel.hpp"

namespace nanogpt {

struct GemmBlocking {
  int64_t mc = 0;            // rows of C per task: a multiple of the kernel's mr
  int64_t nc = 0;            // columns of C per task: a multiple of nr; the unit of work handed out
  int64_t kc = 0;            // depth of one micro-kernel call: a multiple of k_step (0: all of K)
  std::string name() const;  // "mc128_nc256_kc512"
  bool operator==(const GemmBlocking&) const = default;
};

// A good blocking without measuring: sized for L1/L2 and for at least a few tasks per thread.
GemmBlocking default_blocking(const MicroKernel& kernel, int64_t M, int64_t N, int64_t K,
                              int threads);
// What the autotuner chooses among; the first is default_blocking().
std::vector<GemmBlocking> blocking_candidates(const MicroKernel& kernel, int64_t M, int64_t N,
                                              int64_t K, int threads);
// mc, nc, kc rounded up to the kernel's granularity and clipped to the problem.
GemmBlocking normalized(const GemmBlocking& b, const MicroKernel& kernel, int64_t M, int64_t N,
                        int64_t K);

}  // namespace nanogpt
