// General matrix multiply, row-major, fp32: C = alpha·op(A)·op(B) + beta·C, with op(A) M×K
// and op(B) K×N. Training needs three shapes of it:
//   forward        Y  = X·Wᵀ      gemm(kNo,  kYes, T, out, in, 1, X, in,  W, in,  0, Y,  out)
//   input grad     dX = dY·W      gemm(kNo,  kNo,  T, in, out, 1, dY, out, W, in, 0, dX, in)
//   weight grad    dW += dYᵀ·X    gemm(kYes, kNo,  out, in, T, 1, dY, out, X, in, 1, dW, in)
// Structured as BLIS is (src/kernels/gemm/): pack blocks of A and B into micro-panels, a
// macro-kernel over cache blocks, and one register-blocked micro-kernel per ISA chosen at run
// time. Work is split over output tiles only (never over K), so the result is bitwise
// identical whatever the number of threads.
// Empty products are as in BLAS: M = 0 or N = 0 touches nothing (the pointers may be null);
// K = 0 makes C = beta·C (beta = 0 writes zeros without reading C), then the epilogue, and does
// nothing at all when beta = 1 without an epilogue. A negative M, N or K is an InputError.
#pragma once

#include <cstdint>

#include "kernels/bf16.hpp"

namespace nanogpt {

enum class Trans { kNo, kYes };

// Optional work done on each finished tile of C while it is still in cache, in this order.
struct GemmEpilogue {
  // C[i,j] = alpha·acc + beta·C[i,j] + addend_scale·addend[i·ld + j] (one fused multiply-add):
  // a scaled matrix added in the finish instead of in a pass of its own (Newton–Schulz:
  // X' = a·X + B·X).
  const float* addend = nullptr;
  int64_t ld_addend = 0;
  float addend_scale = 1.0f;
  // Backward through relu²: C is the gradient of H = relu²(X); it becomes the gradient of X,
  // relu²'(X)·C = 2·relu(X)·C = 2·√H·C where H > 0, else 0 (NaN in H gives 0), with
  // H[i,j] = relu_squared_output[i·ld + j]. Fused into the MLP's c_proj input gradient, it
  // saves a pass over the T×4d hidden layer, and needs only H, which the forward keeps anyway.
  const float* relu_squared_output = nullptr;
  // The same H stored rounded to bf16 (where only bf16 products and this epilogue read it); at
  // most one of the two is set. Same stride.
  const bf16* relu_squared_output_bf16 = nullptr;
  int64_t ld_relu_squared_output = 0;
  // C[i,j] = max(C[i,j], 0)²: the MLP's activation fused into c_fc, so the pre-activation is
  // never stored.
  bool relu_squared = false;
  // c_bf16[i·ld + j] = bf16(C[i,j]): the cast for a consumer that reads bf16. Where C is
  // large, only written and the copy's rows are 64-byte aligned, the copy is stored
  // non-temporally, as C is.
  bf16* c_bf16 = nullptr;
  int64_t ld_c_bf16 = 0;
  // The finished values go to c_bf16 alone: C is null and never written, and beta must be 0.
  // For a result that only bf16 products read (they would round it as they pack it): half the
  // bytes written, and its readers read half, with the same bits.
  bool c_bf16_only = false;

  // The addend and nothing else: what a kernel finishing tiles in its registers also does
  // (MicroKernel::fn_finishing). A new field above belongs in this test too.
  bool addend_only() const {
    return addend != nullptr && relu_squared_output == nullptr &&
           relu_squared_output_bf16 == nullptr && !relu_squared && c_bf16 == nullptr &&
           !c_bf16_only;
  }
};

void gemm(Trans trans_a, Trans trans_b, int64_t M, int64_t N, int64_t K, float alpha,
          const float* A, int64_t lda, const float* B, int64_t ldb, float beta, float* C,
          int64_t ldc);
// The same, with the epilogue applied to the final C (nullptr: none).
void gemm(Trans trans_a, Trans trans_b, int64_t M, int64_t N, int64_t K, float alpha,
          const float* A, int64_t lda, const float* B, int64_t ldb, float beta, float* C,
          int64_t ldc, const GemmEpilogue* epilogue);

struct MicroKernel;
// The same with a given micro-kernel (tests run every ISA the CPU has).
void gemm_with(const MicroKernel& kernel, Trans trans_a, Trans trans_b, int64_t M, int64_t N,
               int64_t K, float alpha, const float* A, int64_t lda, const float* B, int64_t ldb,
               float beta, float* C, int64_t ldc, const GemmEpilogue* epilogue = nullptr);

}  // namespace nanogpt
