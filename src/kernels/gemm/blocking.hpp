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

// GemmBlocking (mc, nc, kc) is declared in microkernel.hpp, where each kernel's entry carries
// its defaults.

// A good blocking without measuring: the kernel's blocking (sized for L1/L2), clipped to the
// problem and shrunk until there are at least a few tasks per thread.
GemmBlocking default_blocking(const MicroKernel& kernel, int64_t M, int64_t N, int64_t K,
                              int threads);
// What the autotuner chooses among; the first is default_blocking(). Some split M into equal
// row blocks (GemmBlocking::row_parts), refitted to each height they are used at.
std::vector<GemmBlocking> blocking_candidates(const MicroKernel& kernel, int64_t M, int64_t N,
                                              int64_t K, int threads);
// mc, nc, kc rounded up to the kernel's granularity and clipped to the problem; row_parts, if
// set, gives mc for this M (the result has row_parts 0).
GemmBlocking normalized(const GemmBlocking& b, const MicroKernel& kernel, int64_t M, int64_t N,
                        int64_t K);

}  // namespace nanogpt
