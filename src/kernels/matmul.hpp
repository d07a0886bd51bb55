// One entry for the products of the model, the head and the optimizer: the run's precision
// picks the fp32 GEMM or the bf16 one (bf16 operands, fp32 accumulation).
#pragma once

#include "kernels/gemm.hpp"
#include "kernels/gemm/packed_b.hpp"
#include "kernels/gemm_bf16.hpp"

namespace nanogpt {

enum class Precision { kFp32, kBf16 };

inline void matmul(Precision precision, Trans trans_a, Trans trans_b, int64_t M, int64_t N,
                   int64_t K, float alpha, const float* A, int64_t lda, const float* B, int64_t ldb,
                   float beta, float* C, int64_t ldc, const GemmEpilogue* epilogue = nullptr) {
  if (precision == Precision::kBf16) {
    gemm_bf16(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, epilogue);
  } else {
    gemm(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, epilogue);
  }
}

// op(B) (K × N, read as matmul reads it) packed once for the kernel matmul(precision, ...) runs,
// for a B that many products read unchanged (kernels/gemm/packed_b.hpp). Panels are packed in
// parallel; `out` keeps its memory for the next packing.
void pack_matmul_b(Precision precision, Trans trans_b, int64_t K, int64_t N, const float* B,
                   int64_t ldb, PackedB& out);

// C = alpha·op(A)·B + beta·C with B packed by pack_matmul_b (M × B.K times B.K × B.N), on the
// kernel B was packed for: the bits of matmul() on the unpacked B, without packing it. A is fp32
// (rounded to bf16 as it is packed when B's kernel multiplies bf16) or already bf16.
void matmul(Trans trans_a, int64_t M, float alpha, const float* A, int64_t lda, const PackedB& B,
            float beta, float* C, int64_t ldc, const GemmEpilogue* epilogue = nullptr);
void matmul(Trans trans_a, int64_t M, float alpha, const bf16* A, int64_t lda, const PackedB& B,
            float beta, float* C, int64_t ldc, const GemmEpilogue* epilogue = nullptr);

// The same on B's first n columns alone (0 ≤ n ≤ B.N; C is M × n): the bits of matmul() on
// those columns of the unpacked B. For products that read growing prefixes of one B
// (Newton–Schulz's block-triangular Gram products), which then pack it once instead of once each.
void matmul_first_columns(Trans trans_a, int64_t M, int64_t n, float alpha, const float* A,
                          int64_t lda, const PackedB& B, float beta, float* C, int64_t ldc,
                          const GemmEpilogue* epilogue = nullptr);

}  // namespace nanogpt
