// The bf16 entry points: the shared driver with a bf16 kernel, packing from fp32 (rounded as
// it packs) or from bf16; and the reference.
#include "kernels/gemm_bf16.hpp"

#include <vector>

#include "kernels/gemm/driver.hpp"
#include "kernels/gemm/microkernel.hpp"
#include "runtime/thread_pool.hpp"

namespace nanogpt {

namespace {

// op(X) rounded to bf16 as an fp32 copy with the same storage order and a tight ld.
std::vector<float> rounded_copy(const float* X, int64_t ld, Trans t, int64_t rows, int64_t cols) {
  const int64_t stored_rows = t == Trans::kNo ? rows : cols;
  const int64_t stored_cols = t == Trans::kNo ? cols : rows;
  std::vector<float> out(static_cast<size_t>(stored_rows * stored_cols));
  for (int64_t r = 0; r < stored_rows; ++r) {
    for (int64_t c = 0; c < stored_cols; ++c)
      out[r * stored_cols + c] = round_to_bf16(X[r * ld + c]);
  }
  return out;
}

}  // namespace

void gemm_bf16(Trans ta, Trans tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
               int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc,
               const GemmEpilogue* epilogue) {
  gemm_dispatch(active_bf16_microkernel(), PackSource::kF32ToBf16, ta, tb, M, N, K, alpha, A, lda,
                B, ldb, beta, C, ldc, epilogue);
}

void gemm_bf16(Trans ta, Trans tb, int64_t M, int64_t N, int64_t K, float alpha, const bf16* A,
               int64_t lda, const bf16* B, int64_t ldb, float beta, float* C, int64_t ldc,
               const GemmEpilogue* epilogue) {
  gemm_dispatch(active_bf16_microkernel(), PackSource::kBf16, ta, tb, M, N, K, alpha, A, lda, B,
                ldb, beta, C, ldc, epilogue);
}

void gemm_bf16(Trans ta, Trans tb, int64_t M, int64_t N, int64_t K, float alpha, const bf16* A,
               int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc,
               const GemmEpilogue* epilogue) {
  gemm_dispatch(active_bf16_microkernel(), {PackSource::kBf16, PackSource::kF32ToBf16}, ta, tb, M,
                N, K, alpha, A, lda, B, ldb, beta, C, ldc, epilogue);
}

void gemm_bf16_with(const MicroKernel& kernel, Trans ta, Trans tb, int64_t M, int64_t N, int64_t K,
                    float alpha, const float* A, int64_t lda, const float* B, int64_t ldb,
                    float beta, float* C, int64_t ldc, const GemmEpilogue* epilogue) {
  gemm_run(kernel, default_blocking(kernel, M, N, K, ThreadPool::current().size()),
           PackSource::kF32ToBf16, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, epilogue);
}

void gemm_bf16_with(const MicroKernel& kernel, Trans ta, Trans tb, int64_t M, int64_t N, int64_t K,
                    float alpha, const bf16* A, int64_t lda, const bf16* B, int64_t ldb, float beta,
                    float* C, int64_t ldc, const GemmEpilogue* epilogue) {
  gemm_run(kernel, default_blocking(kernel, M, N, K, ThreadPool::current().size()),
           PackSource::kBf16, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, epilogue);
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
