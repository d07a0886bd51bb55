// The bf16 entry points: the shared driver with a bf16 kernel, packing from fp32 (rounded as
// it packs) or from bf16.
#include "kernels/gemm_bf16.hpp"

#include "kernels/gemm/driver.hpp"
#include "kernels/gemm/microkernel.hpp"
#include "runtime/thread_pool.hpp"

namespace nanogpt {

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

void gemm_bf16(Trans ta, Trans tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
               int64_t lda, const bf16* B, int64_t ldb, float beta, float* C, int64_t ldc,
               const GemmEpilogue* epilogue) {
  gemm_dispatch(active_bf16_microkernel(), {PackSource::kF32ToBf16, PackSource::kBf16}, ta, tb, M,
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

}  // namespace nanogpt
