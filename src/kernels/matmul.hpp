// One entry for the products of the model, the head and the optimizer: the run's precision
// picks the fp32 GEMM or the bf16 one (bf16 operands, fp32 accumulation).
#pragma once

#include "kernels/gemm.hpp"
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

}  // namespace nanogpt
