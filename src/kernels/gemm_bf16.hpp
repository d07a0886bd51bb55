// GEMM with bf16 products and fp32 accumulation: C = alpha·op(A)·op(B) + beta·C, C fp32.
// Operands are rounded to bf16 (nearest even) as they are packed, so they may be stored as
// fp32 (the cast is fused into packing: no separate pass over memory) or already as bf16.
// Same shapes and calling convention as gemm() in gemm.hpp; same guarantee of bitwise-identical
// results whatever the number of threads. The kernel is AMX, AVX512-BF16, or an fp32 kernel on
// the rounded operands, as NANOGPT_ISA and the CPU allow (kernels/gemm/isa.hpp).
#pragma once

#include <cstdint>

#include "kernels/bf16.hpp"
#include "kernels/gemm.hpp"

namespace nanogpt {

void gemm_bf16(Trans trans_a, Trans trans_b, int64_t M, int64_t N, int64_t K, float alpha,
               const float* A, int64_t lda, const float* B, int64_t ldb, float beta, float* C,
               int64_t ldc, const GemmEpilogue* epilogue = nullptr);
void gemm_bf16(Trans trans_a, Trans trans_b, int64_t M, int64_t N, int64_t K, float alpha,
               const bf16* A, int64_t lda, const bf16* B, int64_t ldb, float beta, float* C,
               int64_t ldc, const GemmEpilogue* epilogue = nullptr);
// A stored as bf16 (lda in bf16 elements), B as fp32 rounded as it is packed.
void gemm_bf16(Trans trans_a, Trans trans_b, int64_t M, int64_t N, int64_t K, float alpha,
               const bf16* A, int64_t lda, const float* B, int64_t ldb, float beta, float* C,
               int64_t ldc, const GemmEpilogue* epilogue = nullptr);
// A as fp32 rounded as it is packed, B stored as bf16 (ldb in bf16 elements).
void gemm_bf16(Trans trans_a, Trans trans_b, int64_t M, int64_t N, int64_t K, float alpha,
               const float* A, int64_t lda, const bf16* B, int64_t ldb, float beta, float* C,
               int64_t ldc, const GemmEpilogue* epilogue = nullptr);

// The same with a given kernel from available_bf16_microkernels() (tests run each).
void gemm_bf16_with(const MicroKernel& kernel, Trans trans_a, Trans trans_b, int64_t M, int64_t N,
                    int64_t K, float alpha, const float* A, int64_t lda, const float* B,
                    int64_t ldb, float beta, float* C, int64_t ldc,
                    const GemmEpilogue* epilogue = nullptr);
void gemm_bf16_with(const MicroKernel& kernel, Trans trans_a, Trans trans_b, int64_t M, int64_t N,
                    int64_t K, float alpha, const bf16* A, int64_t lda, const bf16* B, int64_t ldb,
                    float beta, float* C, int64_t ldc, const GemmEpilogue* epilogue = nullptr);

}  // namespace nanogpt
