// Reference kernels for the tests, written once over the element type: the obvious loops, each
// sum in double, so the same code checks fp32 kernels (T = float) and builds float64 references
// (T = double).
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/bf16.hpp"
#include "kernels/gemm.hpp"

namespace nanogpt {

// op(X)[r][c] of a row-major X with leading dimension ld.
template <class T>
T reference_element(const T* X, int64_t ld, Trans t, int64_t r, int64_t c) {
  return t == Trans::kNo ? X[r * ld + c] : X[c * ld + r];
}

// C = alpha·op(A)·op(B) + beta·C, op(A) M×K and op(B) K×N; each dot product summed in double
// in order of k, then scaled by alpha and rounded to T once. beta = 0 never reads C.
template <class T>
void reference_gemm(Trans trans_a, Trans trans_b, int64_t M, int64_t N, int64_t K, T alpha,
                    const T* A, int64_t lda, const T* B, int64_t ldb, T beta, T* C, int64_t ldc) {
  for (int64_t i = 0; i < M; ++i) {
    for (int64_t j = 0; j < N; ++j) {
      double sum = 0;
      for (int64_t k = 0; k < K; ++k) {
        sum += static_cast<double>(reference_element(A, lda, trans_a, i, k)) *
               static_cast<double>(reference_element(B, ldb, trans_b, k, j));
      }
      const T prev = beta == T(0) ? T(0) : beta * C[i * ldc + j];
      C[i * ldc + j] = static_cast<T>(alpha * sum) + prev;
    }
  }
}

// The bf16 products' reference: A and B rounded to bf16 (as the packers round them), then
// reference_gemm.
inline void reference_gemm_bf16(Trans trans_a, Trans trans_b, int64_t M, int64_t N, int64_t K,
                                float alpha, const float* A, int64_t lda, const float* B,
                                int64_t ldb, float beta, float* C, int64_t ldc) {
  // op(X) rounded, stored as op(X) itself (rows × cols, tight).
  auto rounded = [](const float* X, int64_t ld, Trans t, int64_t rows, int64_t cols) {
    std::vector<float> out(static_cast<size_t>(rows * cols));
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t c = 0; c < cols; ++c) {
        out[static_cast<size_t>(r * cols + c)] = round_to_bf16(reference_element(X, ld, t, r, c));
      }
    }
    return out;
  };
  const std::vector<float> a = rounded(A, lda, trans_a, M, K), b = rounded(B, ldb, trans_b, K, N);
  reference_gemm(Trans::kNo, Trans::kNo, M, N, K, alpha, a.data(), K, b.data(), N, beta, C, ldc);
}

}  // namespace nanogpt
