// The entry points for products whose B is packed once (kernels/matmul.hpp).
#include "kernels/gemm/driver.hpp"
#include "kernels/gemm/microkernel.hpp"
#include "kernels/matmul.hpp"

namespace nanogpt {

void pack_matmul_b(Precision precision, Trans trans_b, int64_t K, int64_t N, const float* B,
                   int64_t ldb, PackedB& out) {
  if (precision == Precision::kBf16) {
    pack_b_operand(active_bf16_microkernel(), PackSource::kF32ToBf16, trans_b, K, N, B, ldb, out);
  } else {
    pack_b_operand(active_microkernel(), PackSource::kF32, trans_b, K, N, B, ldb, out);
  }
}

namespace {

// fp32 A is read as B was: kept for an fp32 product, rounded to bf16 for a bf16 one.
PackSource fp32_a_source(const PackedB& B) {
  return B.source == PackSource::kF32 ? PackSource::kF32 : PackSource::kF32ToBf16;
}

}  // namespace

void matmul(Trans trans_a, int64_t M, float alpha, const float* A, int64_t lda, const PackedB& B,
            float beta, float* C, int64_t ldc, const GemmEpilogue* epilogue) {
  gemm_dispatch_packed_b(fp32_a_source(B), trans_a, M, B.N, alpha, A, lda, B, beta, C, ldc,
                         epilogue);
}

void matmul(Trans trans_a, int64_t M, float alpha, const bf16* A, int64_t lda, const PackedB& B,
            float beta, float* C, int64_t ldc, const GemmEpilogue* epilogue) {
  gemm_dispatch_packed_b(PackSource::kBf16, trans_a, M, B.N, alpha, A, lda, B, beta, C, ldc,
                         epilogue);
}

void matmul_first_columns(Trans trans_a, int64_t M, int64_t n, float alpha, const float* A,
                          int64_t lda, const PackedB& B, float beta, float* C, int64_t ldc,
                          const GemmEpilogue* epilogue) {
  gemm_dispatch_packed_b(fp32_a_source(B), trans_a, M, n, alpha, A, lda, B, beta, C, ldc, epilogue);
}

}  // namespace nanogpt
