// The fp32 entry points.
#include "kernels/gemm.hpp"

#include "kernels/gemm/driver.hpp"
#include "kernels/gemm/microkernel.hpp"
#include "runtime/thread_pool.hpp"

namespace nanogpt {

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

}  // namespace nanogpt
