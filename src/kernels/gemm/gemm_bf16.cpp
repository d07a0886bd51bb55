// bf16 GEMM, first version: operands rounded to bf16 into fp32 scratch, then the fp32 GEMM.
// Exact (a product of two bf16 values fits an fp32 FMA without rounding), but it makes a pass
// over memory the packed AMX/AVX512-BF16 kernels avoid.
#include <algorithm>
#include <type_traits>
#include <vector>

#include "kernels/gemm_bf16.hpp"

namespace nanogpt {

namespace {

template <class In>
std::vector<float> rounded_copy(const In* X, int64_t ld, Trans t, int64_t rows, int64_t cols) {
  // op(X) is rows×cols; stored it is (t == kNo ? rows×ld : cols×ld).
  const int64_t stored_rows = t == Trans::kNo ? rows : cols;
  const int64_t stored_cols = t == Trans::kNo ? cols : rows;
  std::vector<float> out(static_cast<size_t>(stored_rows * stored_cols));
  for (int64_t r = 0; r < stored_rows; ++r) {
    for (int64_t c = 0; c < stored_cols; ++c) {
      if constexpr (std::is_same_v<In, float>) {
        out[r * stored_cols + c] = round_to_bf16(X[r * ld + c]);
      } else {
        out[r * stored_cols + c] = to_float(X[r * ld + c]);
      }
    }
  }
  return out;
}

void apply_epilogue(int64_t M, int64_t N, const float* C, int64_t ldc, const GemmEpilogue* e) {
  if (e == nullptr) return;
  for (int64_t i = 0; i < M; ++i) {
    for (int64_t j = 0; j < N; ++j) {
      const float c = C[i * ldc + j];
      if (e->relu_squared != nullptr) {
        const float r = std::max(c, 0.0f);
        e->relu_squared[i * e->ld_relu_squared + j] = r * r;
      }
      if (e->c_bf16 != nullptr) e->c_bf16[i * e->ld_c_bf16 + j] = to_bf16(c);
    }
  }
}

template <class In>
void gemm_bf16_impl(Trans ta, Trans tb, int64_t M, int64_t N, int64_t K, float alpha, const In* A,
                    int64_t lda, const In* B, int64_t ldb, float beta, float* C, int64_t ldc,
                    const GemmEpilogue* epilogue) {
  if (M <= 0 || N <= 0) return;
  std::vector<float> a = rounded_copy(A, lda, ta, M, K);
  std::vector<float> b = rounded_copy(B, ldb, tb, K, N);
  const int64_t a_ld = ta == Trans::kNo ? K : M;
  const int64_t b_ld = tb == Trans::kNo ? N : K;
  gemm(ta, tb, M, N, K, alpha, a.data(), a_ld, b.data(), b_ld, beta, C, ldc);
  apply_epilogue(M, N, C, ldc, epilogue);
}

}  // namespace

void gemm_bf16(Trans ta, Trans tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
               int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc,
               const GemmEpilogue* epilogue) {
  gemm_bf16_impl(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, epilogue);
}

void gemm_bf16(Trans ta, Trans tb, int64_t M, int64_t N, int64_t K, float alpha, const bf16* A,
               int64_t lda, const bf16* B, int64_t ldb, float beta, float* C, int64_t ldc,
               const GemmEpilogue* epilogue) {
  gemm_bf16_impl(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, epilogue);
}

void gemm_bf16_reference(Trans ta, Trans tb, int64_t M, int64_t N, int64_t K, float alpha,
                         const float* A, int64_t lda, const float* B, int64_t ldb, float beta,
                         float* C, int64_t ldc) {
  std::vector<float> a = rounded_copy(A, lda, ta, M, K);
  std::vector<float> b = rounded_copy(B, ldb, tb, K, N);
  gemm_reference(ta, tb, M, N, K, alpha, a.data(), ta == Trans::kNo ? K : M, b.data(),
                 tb == Trans::kNo ? N : K, beta, C, ldc);
}

}  // namespace nanogpt
