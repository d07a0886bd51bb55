// The fp32 entry points and the reference.
#include "kernels/gemm.hpp"

#include "kernels/gemm/driver.hpp"
#include "kernels/gemm/microkernel.hpp"
#include "runtime/thread_pool.hpp"

namespace nanogpt {

namespace {

inline float at(const float* X, int64_t ld, Trans t, int64_t r, int64_t c) {
  return t == Trans::kNo ? X[r * ld + c] : X[c * ld + r];
}

}  // namespace

void gemm(Trans trans_a, Trans trans_b, int64_t M, int64_t N, int64_t K, float alpha,
          const float* A, int64_t lda, const float* B, int64_t ldb, float beta, float* C,
          int64_t ldc, const GemmEpilogue* epilogue) {
  gemm_dispatch(active_microkernel(), PackSource::kF32, trans_a, trans_b, M, N, K, alpha, A, lda, B,
                ldb, beta, C, ldc, epilogue);
}

void gemm(Trans trans_a, Trans trans_b, int64_t M, int64_t N, int64_t K, float alpha,
          const float* A, int64_t lda, const float* B, int64_t ldb, float beta, float* C,
          int64_t ldc) {
  gemm(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, nullptr);
}

void gemm_with(const MicroKernel& kernel, Trans trans_a, Trans trans_b, int64_t M, int64_t N,
               int64_t K, float alpha, const float* A, int64_t lda, const float* B, int64_t ldb,
               float beta, float* C, int64_t ldc, const GemmEpilogue* epilogue) {
  const GemmBlocking blocking = default_blocking(kernel, M, N, K, ThreadPool::current().size());
  gemm_run(kernel, blocking, PackSource::kF32, trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb,
           beta, C, ldc, epilogue);
}

void gemm_reference(Trans trans_a, Trans trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                    const float* A, int64_t lda, const float* B, int64_t ldb, float beta, float* C,
                    int64_t ldc) {
  for (int64_t i = 0; i < M; ++i) {
    for (int64_t j = 0; j < N; ++j) {
      double sum = 0;
      for (int64_t k = 0; k < K; ++k) {
        sum += static_cast<double>(at(A, lda, trans_a, i, k)) * at(B, ldb, trans_b, k, j);
      }
      float prev = beta == 0.0f ? 0.0f : beta * C[i * ldc + j];
      C[i * ldc + j] = static_cast<float>(alpha * sum) + prev;
    }
  }
}

}  // namespace nanogpt
