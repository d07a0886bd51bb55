// GEMM with bf16 products and fp32 accumulation: C = alpha·op(A)·op(B) + beta·C, C fp32.
// Operands are rounded to bf16 (nearest even) as they are packed, so they may be stored as
// fp32 (the cast is fused into packing: no separate pass over memory) or already as bf16.
// Same shapes and calling convention as gemm() in gemm.hpp; same guarantee of bitwise-identical
// results whatever the number of threads.
#pragma once

#include <cstdint>

#include "kernels/bf16.hpp"
#include "kernels/gemm.hpp"

namespace nanogpt {

// Optional work done on each finished tile of C while it is still in cache.
struct GemmEpilogue {
  // relu_squared[i·ld + j] = max(C[i,j], 0)², the MLP's activation fused into c_fc.
  float* relu_squared = nullptr;
  int64_t ld_relu_squared = 0;
  // c_bf16[i·ld + j] = bf16(C[i,j]): the cast for a consumer that reads bf16.
  bf16* c_bf16 = nullptr;
  int64_t ld_c_bf16 = 0;
};

void gemm_bf16(Trans trans_a, Trans trans_b, int64_t M, int64_t N, int64_t K, float alpha,
               const float* A, int64_t lda, const float* B, int64_t ldb, float beta, float* C,
               int64_t ldc, const GemmEpilogue* epilogue = nullptr);
void gemm_bf16(Trans trans_a, Trans trans_b, int64_t M, int64_t N, int64_t K, float alpha,
               const bf16* A, int64_t lda, const bf16* B, int64_t ldb, float beta, float* C,
               int64_t ldc, const GemmEpilogue* epilogue = nullptr);

// The reference: operands rounded to bf16, products summed in double.
void gemm_bf16_reference(Trans trans_a, Trans trans_b, int64_t M, int64_t N, int64_t K,
                         float alpha, const float* A, int64_t lda, const float* B, int64_t ldb,
                         float beta, float* C, int64_t ldc);

}  // namespace nanogpt
