// Grouped GEMM for a mixture of experts: one call multiplies every group's block of rows by that
// group's own matrix. Tokens are stacked in expert order (kernels/moe_routing.hpp), so group g
// is rows [offsets[g], offsets[g+1]) of the stacked token matrices, and expert g's weights are
// the g-th matrix of a stack. An expert MLP's training needs three products, for experts of
// `out`×`in` weights W (stacked, stride out·in) and groups of tokens X (stacked rows × in):
//   forward        Y_g  = X_g·W_gᵀ     grouped_gemm_rows(p, offs, kYes, out, in, 1, X, in, W, in,
//                                                        out·in, 0, Y, out)
//   input grad     dX_g = dY_g·W_g     grouped_gemm_rows(p, offs, kNo, in, out, 1, dY, out, W, in,
//                                                        out·in, 0, dX, in)
//   weight grad    dW_g += dY_gᵀ·X_g   grouped_gemm_reduce(p, offs, out, in, 1, dY, out, X, in, 1,
//                                                          dW, in, out·in)
// The weight gradient's reduction runs over the group's rows, so it has its own entry.
//
// One call packs every group's operands, then hands all groups' MC×NC output tiles to one task
// queue on the thread pool: no barrier per expert, and an empty group costs nothing. Each tile
// is computed whole by one task, its sum over the reduction in a fixed order, so the bits do
// not depend on the thread count, and they equal a per-group gemm() with the same micro-kernel.
#pragma once

#include <cstdint>
#include <span>

#include "kernels/gemm.hpp"
#include "kernels/matmul.hpp"

namespace nanogpt {

struct MicroKernel;
enum class PackSource;

// Row offsets of the groups in the stacked matrices: groups + 1 entries, the first 0, never
// decreasing (rows sorted by group). Group g is rows [offsets[g], offsets[g+1]).
using GroupOffsets = std::span<const int64_t>;

// Groups split the rows: for every g, C_g = alpha·A_g·op(B_g) + beta·C_g, where
//   A_g   rows of A in group g (rows_g × K, row-major, lda),
//   B_g   the matrix at B + g·stride_b: K × N (trans_b kNo) or stored N × K (kYes, as weights
//         are), leading dimension ldb,
//   C_g   rows of C in group g (rows_g × N, ldc).
// beta = 0 never reads C. The epilogue (gemm.hpp) is applied to each finished tile; its
// coordinates are rows of the stacked C, so its pointers address stacked matrices too.
// Throws InputError on malformed offsets or leading dimensions/strides too small for the shape.
void grouped_gemm_rows(Precision precision, GroupOffsets offsets, Trans trans_b, int64_t N,
                       int64_t K, float alpha, const float* A, int64_t lda, const float* B,
                       int64_t ldb, int64_t stride_b, float beta, float* C, int64_t ldc,
                       const GemmEpilogue* epilogue = nullptr);

// Groups split the reduction: for every g, C_g = alpha·A_gᵀ·B_g + beta·C_g (M × N at
// C + g·stride_c, ldc), where A_g is rows of A in group g (rows_g × M, lda) and B_g rows of B
// in group g (rows_g × N, ldb). An empty group leaves beta·C_g (nothing to do when beta = 1).
void grouped_gemm_reduce(Precision precision, GroupOffsets offsets, int64_t M, int64_t N,
                         float alpha, const float* A, int64_t lda, const float* B, int64_t ldb,
                         float beta, float* C, int64_t ldc, int64_t stride_c);

// The same with a given micro-kernel, reading the fp32 operands as `source` says (kF32, or
// kF32ToBf16 for a bf16 kernel): tests and benchmarks run every kernel the CPU has.
void grouped_gemm_rows_with(const MicroKernel& kernel, PackSource source, GroupOffsets offsets,
                            Trans trans_b, int64_t N, int64_t K, float alpha, const float* A,
                            int64_t lda, const float* B, int64_t ldb, int64_t stride_b, float beta,
                            float* C, int64_t ldc, const GemmEpilogue* epilogue = nullptr);
void grouped_gemm_reduce_with(const MicroKernel& kernel, PackSource source, GroupOffsets offsets,
                              int64_t M, int64_t N, float alpha, const float* A, int64_t lda,
                              const float* B, int64_t ldb, float beta, float* C, int64_t ldc,
                              int64_t stride_c);

}  // namespace nanogpt
