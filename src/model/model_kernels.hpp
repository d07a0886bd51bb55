// The kernels the GPT's math calls, for each scalar type it is instantiated with: float uses
// the fast kernels (src/kernels/), double uses plain float64 references, so the same model code
// can be checked by finite differences in float64.
#pragma once

#include <cstdint>

#include "kernels/fused_linear_cross_entropy.hpp"
#include "kernels/matmul.hpp"
#include "kernels/moe_routing.hpp"

namespace nanogpt {

// As kernels/attention.hpp's AttentionParams: T queries, the last T of T_kv key/value positions
// (T_kv = T in training; decoding adds T new tokens to a cache of T_kv − T); H query heads,
// query head h reading key/value head h / (H / H_kv). q (and dq) rows have stride ld_q; k, v
// (and dk, dv) rows ld_kv; doc is [T_kv]. The backward needs T_kv == T.
template <class Real>
struct AttentionArgs {
  int64_t T = 0, T_kv = 0, H = 0, H_kv = 0, D = 0;
  const Real *q = nullptr, *k = nullptr, *v = nullptr;
  // q, k, v also stored rounded (float with bf16 products: AttentionParams::q_bf16), or null.
  const bf16 *q_bf16 = nullptr, *k_bf16 = nullptr, *v_bf16 = nullptr;
  int64_t ld_q = 0, ld_kv = 0;
  const int32_t* doc = nullptr;
  int64_t window_blocks = 1, block_size = 128;
  float scale = 0.12f;
  Precision precision = Precision::kFp32;  // ignored by the float64 references
};

template <class Real>
struct LossArgs {
  int64_t T = 0, d = 0, V = 0;
  const Real* x = nullptr;
  const Real* W = nullptr;
  const PackedB* W_packed = nullptr;    // W packed for the logits (GptT::packed_head()), or null
  FusedLossBuffers* buffers = nullptr;  // kept between calls (FusedLossParams::buffers), or null
  const int32_t* targets = nullptr;
  float softcap = 30.0f, softcap_divisor = 1.0f;
  bool fp8 = false;
  float loss_scale = 1.0f;
  Precision precision = Precision::kFp32;  // ignored by the float64 references
  // Post-training (FusedLossParams has the same): row t's loss is w_t·(-log softmax(y/τ)[target]);
  // per_token outputs stay unweighted; entropy (nullable) receives each row's entropy.
  const Real* row_weights = nullptr;
  float temperature = 1.0f;
  Real* entropy = nullptr;
};

// What a model's product does to its tile of C before storing it (kernels/gemm.hpp,
// GemmEpilogue), in this order:
// - residual R: C = R + product, R with C's stride (the projections that end a block's
//   branch land on the residual stream in the same pass, R's copy is never made: the bits of
//   beta = 1 on a copy of R);
// - the MLP's activation: with relu_squared, C becomes relu²(C) in place (c_fc's forward: the
//   pre-activation is never stored); with relu_squared_output H, C (the gradient of
//   H = relu²(X)) becomes the gradient of X, 2·√H·C where H > 0, else 0 (c_proj's input
//   gradient). With bf16 products on float, H may be stored rounded
//   (relu_squared_output_rounded) instead: at most one of the two is set; ld is H's stride.
template <class Real>
struct ProductEpilogue {
  const Real* residual = nullptr;
  bool relu_squared = false;
  const Real* relu_squared_output = nullptr;
  const bf16* relu_squared_output_rounded = nullptr;
  int64_t ld = 0;

  bool empty() const {
    return residual == nullptr && !relu_squared && relu_squared_output == nullptr &&
           relu_squared_output_rounded == nullptr;
  }
};

// `name` says which of the model's products this is, for the profiler.
void model_gemm(Precision precision, const char* name, Trans ta, Trans tb, int64_t M, int64_t N,
                int64_t K, float alpha, const float* A, int64_t lda, const float* B, int64_t ldb,
                float beta, float* C, int64_t ldc);
void model_gemm(Precision precision, const char* name, Trans ta, Trans tb, int64_t M, int64_t N,
                int64_t K, double alpha, const double* A, int64_t lda, const double* B, int64_t ldb,
                double beta, double* C, int64_t ldc);
void model_gemm(Precision precision, const char* name, Trans ta, Trans tb, int64_t M, int64_t N,
                int64_t K, float alpha, const float* A, int64_t lda, const float* B, int64_t ldb,
                float beta, float* C, int64_t ldc, const ProductEpilogue<float>& epilogue);
void model_gemm(Precision precision, const char* name, Trans ta, Trans tb, int64_t M, int64_t N,
                int64_t K, double alpha, const double* A, int64_t lda, const double* B, int64_t ldb,
                double beta, double* C, int64_t ldc, const ProductEpilogue<double>& epilogue);

// With bf16 products (precision must be kBf16): A given already rounded to bf16, the bits of
// the same product on the fp32 A it was rounded from.
void model_gemm(Precision precision, const char* name, Trans ta, Trans tb, int64_t M, int64_t N,
                int64_t K, float alpha, const bf16* A, int64_t lda, const float* B, int64_t ldb,
                float beta, float* C, int64_t ldc, const ProductEpilogue<float>& epilogue = {});
// B given already rounded to bf16 (the bits of the product on the fp32 B it was rounded from).
void model_gemm(Precision precision, const char* name, Trans ta, Trans tb, int64_t M, int64_t N,
                int64_t K, float alpha, const float* A, int64_t lda, const bf16* B, int64_t ldb,
                float beta, float* C, int64_t ldc);
// Both given rounded.
void model_gemm(Precision precision, const char* name, Trans ta, Trans tb, int64_t M, int64_t N,
                int64_t K, float alpha, const bf16* A, int64_t lda, const bf16* B, int64_t ldb,
                float beta, float* C, int64_t ldc);
// The same finished product (alpha·op(A)·op(B), then the epilogue) stored only rounded to bf16,
// C_bf16 (GemmEpilogue::c_bf16_only): for a result that bf16 products alone read.
void model_gemm(Precision precision, const char* name, Trans ta, Trans tb, int64_t M, int64_t N,
                int64_t K, float alpha, const float* A, int64_t lda, const float* B, int64_t ldb,
                bf16* C_bf16, int64_t ldc, const ProductEpilogue<float>& epilogue);
void model_gemm(Precision precision, const char* name, Trans ta, Trans tb, int64_t M, int64_t N,
                int64_t K, float alpha, const bf16* A, int64_t lda, const float* B, int64_t ldb,
                bf16* C_bf16, int64_t ldc, const ProductEpilogue<float>& epilogue);

// C = A·op(B) + beta·C with op(B) packed once (model/packed_weights.hpp): M rows of A
// (lda = B.K), C's ldc = B.N; the bits of model_gemm on the unpacked B.
void model_gemm_packed(const char* name, int64_t M, const float* A, const PackedB& B, float beta,
                       float* C, const ProductEpilogue<float>& epilogue);
// The same with A already rounded to bf16 (B packed for bf16 products).
void model_gemm_packed(const char* name, int64_t M, const bf16* A, const PackedB& B, float beta,
                       float* C, const ProductEpilogue<float>& epilogue);
// The same finished product stored only rounded to bf16, into C_bf16 (ldc = B.N).
void model_gemm_packed(const char* name, int64_t M, const float* A, const PackedB& B, bf16* C_bf16,
                       const ProductEpilogue<float>& epilogue);
void model_gemm_packed(const char* name, int64_t M, const bf16* A, const PackedB& B, bf16* C_bf16,
                       const ProductEpilogue<float>& epilogue);

// A mixture of experts' products over the expert groups of `plan` (kernels/grouped_gemm.hpp),
// B the stack of the experts' matrices (the g-th at B + g·stride_b):
//   rows    C_g = A_g·op(B_g)   (the forward and the input gradient; C overwritten)
//   reduce  C_g += A_gᵀ·B_g     (the weight gradient; C_g at C + g·stride_c)
void model_grouped_gemm_rows(Precision precision, const char* name, const MoePlan& plan,
                             Trans trans_b, int64_t N, int64_t K, const float* A, int64_t lda,
                             const float* B, int64_t ldb, int64_t stride_b, float* C, int64_t ldc,
                             const ProductEpilogue<float>& epilogue);
void model_grouped_gemm_rows(Precision precision, const char* name, const MoePlan& plan,
                             Trans trans_b, int64_t N, int64_t K, const double* A, int64_t lda,
                             const double* B, int64_t ldb, int64_t stride_b, double* C, int64_t ldc,
                             const ProductEpilogue<double>& epilogue);
void model_grouped_gemm_reduce(Precision precision, const char* name, const MoePlan& plan,
                               int64_t M, int64_t N, const float* A, int64_t lda, const float* B,
                               int64_t ldb, float* C, int64_t ldc, int64_t stride_c);
void model_grouped_gemm_reduce(Precision precision, const char* name, const MoePlan& plan,
                               int64_t M, int64_t N, const double* A, int64_t lda, const double* B,
                               int64_t ldb, double* C, int64_t ldc, int64_t stride_c);

// The token permutation of kernels/moe_routing.hpp on tight rows of width d: gather into expert
// order, its backward (dX +=), the weighted combine back (Y +=) and its backward.
void model_moe_gather(const MoePlan& plan, int64_t d, const float* X, float* Xe);
void model_moe_gather(const MoePlan& plan, int64_t d, const double* X, double* Xe);
void model_moe_gather_backward(const MoePlan& plan, int64_t d, const float* dXe, float* dX);
void model_moe_gather_backward(const MoePlan& plan, int64_t d, const double* dXe, double* dX);
void model_moe_combine(const MoePlan& plan, int64_t d, const float* Ye, const float* weights,
                       float* Y);
void model_moe_combine(const MoePlan& plan, int64_t d, const double* Ye, const double* weights,
                       double* Y);
void model_moe_combine_backward(const MoePlan& plan, int64_t d, const float* dY, const float* Ye,
                                const float* weights, float* dYe, float* dweights);
void model_moe_combine_backward(const MoePlan& plan, int64_t d, const double* dY, const double* Ye,
                                const double* weights, double* dYe, double* dweights);

// out_rounded (float only): out rounded to bf16 as well (attention_forward).
void model_attention_forward(const AttentionArgs<float>& a, float* out, float* lse,
                             bf16* out_rounded = nullptr);
void model_attention_forward(const AttentionArgs<double>& a, double* out, double* lse,
                             bf16* out_rounded = nullptr);
// dout_rounded and out_rounded (float only, bf16 products): dout and out stored in bf16 instead
// (dout, out null; attention_backward's dout_bf16 and out_bf16).
void model_attention_backward(const AttentionArgs<float>& a, const float* out, const float* lse,
                              const float* dout, float* dq, float* dk, float* dv,
                              const bf16* dout_rounded = nullptr,
                              const bf16* out_rounded = nullptr);
void model_attention_backward(const AttentionArgs<double>& a, const double* out, const double* lse,
                              const double* dout, double* dq, double* dk, double* dv,
                              const bf16* dout_rounded = nullptr,
                              const bf16* out_rounded = nullptr);

// Σ_t loss_t of the soft-capped head; per_token may be null.
double model_loss_forward(const LossArgs<float>& a, float* per_token);
double model_loss_forward(const LossArgs<double>& a, double* per_token);
// Same value; dx overwritten, dW accumulated, both for loss_scale·Σ_t loss_t.
double model_loss_backward(const LossArgs<float>& a, float* dx, float* dW);
double model_loss_backward(const LossArgs<double>& a, double* dx, double* dW);

}  // namespace nanogpt
