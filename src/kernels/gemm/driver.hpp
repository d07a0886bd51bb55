// The GEMM driver shared by the fp32 and bf16 entry points: packing into the kernel's layouts,
// a macro-kernel over cache blocks and the fused finish of each tile.
//
// All of op(A) is packed once per call and op(B) once per column superblock (all of N unless
// the packed panel would outgrow the caches). Tasks are MC×NC tiles of C handed out one at a
// time; a task packs the micro-panels it needs on first touch, claiming each with an atomic
// flag (another task needing a panel being packed waits for it), so a call costs one
// parallel_for per superblock and each panel is packed exactly once. Packing is deterministic
// and the work is split over C only, so the bits do not depend on the thread count.
#pragma once

#include <cstdint>

#include "kernels/gemm.hpp"
#include "kernels/gemm/blocking.hpp"
#include "kernels/gemm/microkernel.hpp"
#include "kernels/gemm/packed_b.hpp"

namespace nanogpt {

// C = alpha·op(A)·op(B) + beta·C with the given kernel and blocking; A and B are read as
// `sources` says (fp32, fp32 rounded to bf16, or bf16). Throws std::invalid_argument if the
// kernel cannot pack that source.
void gemm_run(const MicroKernel& kernel, const GemmBlocking& blocking, PackSources sources,
              Trans trans_a, Trans trans_b, int64_t M, int64_t N, int64_t K, float alpha,
              const void* A, int64_t lda, const void* B, int64_t ldb, float beta, float* C,
              int64_t ldc, const GemmEpilogue* epilogue);

// The same with op(B) given packed (gemm/packed_b.hpp) for this kernel (std::invalid_argument
// if it was packed for another), of which the product reads the first N columns (N ≤ B.N; C is
// M × N); A is read as `a_source` says. Gives the bits of gemm_run on those columns of the
// unpacked B.
void gemm_run_packed_b(const MicroKernel& kernel, const GemmBlocking& blocking, PackSource a_source,
                       Trans trans_a, int64_t M, int64_t N, float alpha, const void* A, int64_t lda,
                       const PackedB& B, float beta, float* C, int64_t ldc,
                       const GemmEpilogue* epilogue);

// The blocking gemm()/gemm_bf16() use: default_blocking() for small problems, else the
// autotuner's choice among blocking_candidates() for this op, shape, dtype, kernel and thread
// count (kernels/autotune.hpp; timed on first use, into a scratch C). All candidates give the
// same bits, so tuning never changes results.
GemmBlocking chosen_blocking(const MicroKernel& kernel, PackSources sources, Trans trans_a,
                             Trans trans_b, int64_t M, int64_t N, int64_t K, const void* A,
                             int64_t lda, const void* B, int64_t ldb, float beta, const float* C,
                             int64_t ldc);

// gemm_run with chosen_blocking().
void gemm_dispatch(const MicroKernel& kernel, PackSources sources, Trans trans_a, Trans trans_b,
                   int64_t M, int64_t N, int64_t K, float alpha, const void* A, int64_t lda,
                   const void* B, int64_t ldb, float beta, float* C, int64_t ldc,
                   const GemmEpilogue* epilogue);

// gemm_run_packed_b on B's own kernel with chosen_blocking() (the autotuner keys products with
// a packed B apart from the others, and times them so).
void gemm_dispatch_packed_b(PackSource a_source, Trans trans_a, int64_t M, int64_t N, float alpha,
                            const void* A, int64_t lda, const PackedB& B, float beta, float* C,
                            int64_t ldc, const GemmEpilogue* epilogue);

}  // namespace nanogpt
