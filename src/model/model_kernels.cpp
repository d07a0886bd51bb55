// float: the model's calls forwarded to the fast kernels.
#include "model/model_kernels.hpp"

#include <stdexcept>
#include <string>

#include "kernels/attention.hpp"
#include "kernels/fused_linear_cross_entropy.hpp"
#include "kernels/grouped_gemm.hpp"
#include "runtime/profiler.hpp"

namespace nanogpt {

namespace {

AttentionParams attention_params(const AttentionArgs<float>& a) {
  AttentionParams p;
  p.T = a.T;
  p.T_kv = a.T_kv;
  p.H = a.H;
  p.H_kv = a.H_kv;
  p.D = a.D;
  p.q = a.q;
  p.k = a.k;
  p.v = a.v;
  p.q_bf16 = a.q_bf16;
  p.k_bf16 = a.k_bf16;
  p.v_bf16 = a.v_bf16;
  p.ld_q = a.ld_q;
  p.ld_kv = a.ld_kv;
  p.doc = a.doc;
  p.window_blocks = a.window_blocks;
  p.block_size = a.block_size;
  p.scale = a.scale;
  p.precision = a.precision;
  return p;
}

// The model's epilogue as the GEMM's, for a C of stride ldc (the residual's too).
GemmEpilogue gemm_epilogue(const ProductEpilogue<float>& e, int64_t ldc) {
  GemmEpilogue ep;
  ep.addend = e.residual;
  ep.ld_addend = e.residual != nullptr ? ldc : 0;
  ep.relu_squared = e.relu_squared;
  ep.relu_squared_output = e.relu_squared_output;
  ep.relu_squared_output_bf16 = e.relu_squared_output_rounded;
  ep.ld_relu_squared_output = e.ld;
  return ep;
}

// The GEMM's epilogue argument: none for an empty one, which keeps the finishes that only
// products without an epilogue take (sums stored straight into C, finished in registers).
const GemmEpilogue* epilogue_or_null(const ProductEpilogue<float>& e, const GemmEpilogue& ep) {
  return e.empty() ? nullptr : &ep;
}

// Bytes per element of C that the epilogue reads (the residual, the relu² gradient's H), for
// the profiler's traffic.
double epilogue_bytes(const ProductEpilogue<float>& e) {
  const double h = e.relu_squared_output != nullptr           ? 4.0
                   : e.relu_squared_output_rounded != nullptr ? 2.0
                                                              : 0.0;
  return h + (e.residual != nullptr ? 4.0 : 0.0);
}

FusedLossParams loss_params(const LossArgs<float>& a) {
  FusedLossParams p;
  p.T = a.T;
  p.d = a.d;
  p.V = a.V;
  p.x = a.x;
  p.W = a.W;
  p.W_packed = a.W_packed;
  p.buffers = a.buffers;
  p.targets = a.targets;
  p.softcap = a.softcap;
  p.softcap_divisor = a.softcap_divisor;
  p.fp8 = a.fp8;
  p.loss_scale = a.loss_scale;
  p.precision = a.precision;
  p.row_weights = a.row_weights;
  p.temperature = a.temperature;
  p.entropy = a.entropy;
  return p;
}

}  // namespace

void model_gemm(Precision precision, const char* name, Trans ta, Trans tb, int64_t M, int64_t N,
                int64_t K, float alpha, const float* A, int64_t lda, const float* B, int64_t ldb,
                float beta, float* C, int64_t ldc) {
  const double m = static_cast<double>(M), n = static_cast<double>(N), k = static_cast<double>(K);
  ProfileScope scope("gemm", name, {M, N, K}, 2.0 * m * n * k,
                     4.0 * (m * k + k * n + (beta == 0.0f ? 1.0 : 2.0) * m * n));
  matmul(precision, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

void model_gemm(Precision precision, const char* name, Trans ta, Trans tb, int64_t M, int64_t N,
                int64_t K, float alpha, const float* A, int64_t lda, const float* B, int64_t ldb,
                float beta, float* C, int64_t ldc, const ProductEpilogue<float>& epilogue) {
  const double m = static_cast<double>(M), n = static_cast<double>(N), k = static_cast<double>(K);
  ProfileScope scope("gemm", name, {M, N, K}, 2.0 * m * n * k,
                     4.0 * (m * k + k * n + (beta == 0.0f ? 1.0 : 2.0) * m * n) +
                         epilogue_bytes(epilogue) * m * n);
  const GemmEpilogue ep = gemm_epilogue(epilogue, ldc);
  if (precision == Precision::kBf16) {
    gemm_bf16(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, epilogue_or_null(epilogue, ep));
  } else {
    gemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, epilogue_or_null(epilogue, ep));
  }
}

namespace {

void require_bf16_products(Precision precision, const char* name) {
  if (precision != Precision::kBf16) {
    throw std::invalid_argument(std::string("model_gemm: ") + name +
                                " has a bf16 operand or result, which only bf16 products "
                                "(precision bf16) read or write");
  }
}

// A bf16 product with one operand or both given as bf16 (TA, TB: float or bf16, the bytes
// per value the profiler counts for each).
template <class TA, class TB>
void mixed_gemm(Precision precision, const char* name, Trans ta, Trans tb, int64_t M, int64_t N,
                int64_t K, float alpha, const TA* A, int64_t lda, const TB* B, int64_t ldb,
                float beta, float* C, int64_t ldc, const ProductEpilogue<float>& epilogue) {
  require_bf16_products(precision, name);
  const double m = static_cast<double>(M), n = static_cast<double>(N), k = static_cast<double>(K);
  ProfileScope scope("gemm", name, {M, N, K}, 2.0 * m * n * k,
                     static_cast<double>(sizeof(TA)) * m * k +
                         static_cast<double>(sizeof(TB)) * k * n +
                         (4.0 * (beta == 0.0f ? 1.0 : 2.0) + epilogue_bytes(epilogue)) * m * n);
  const GemmEpilogue ep = gemm_epilogue(epilogue, ldc);
  gemm_bf16(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, epilogue_or_null(epilogue, ep));
}

}  // namespace

void model_gemm(Precision precision, const char* name, Trans ta, Trans tb, int64_t M, int64_t N,
                int64_t K, float alpha, const bf16* A, int64_t lda, const float* B, int64_t ldb,
                float beta, float* C, int64_t ldc, const ProductEpilogue<float>& epilogue) {
  mixed_gemm(precision, name, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, epilogue);
}

void model_gemm(Precision precision, const char* name, Trans ta, Trans tb, int64_t M, int64_t N,
                int64_t K, float alpha, const float* A, int64_t lda, const bf16* B, int64_t ldb,
                float beta, float* C, int64_t ldc) {
  mixed_gemm(precision, name, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, {});
}

void model_gemm(Precision precision, const char* name, Trans ta, Trans tb, int64_t M, int64_t N,
                int64_t K, float alpha, const bf16* A, int64_t lda, const bf16* B, int64_t ldb,
                float beta, float* C, int64_t ldc) {
  mixed_gemm(precision, name, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, {});
}

namespace {

// A bf16 product stored only rounded (GemmEpilogue::c_bf16_only), A as TA (float or bf16).
template <class TA>
void gemm_to_bf16(Precision precision, const char* name, Trans ta, Trans tb, int64_t M, int64_t N,
                  int64_t K, float alpha, const TA* A, int64_t lda, const float* B, int64_t ldb,
                  bf16* C_bf16, int64_t ldc, const ProductEpilogue<float>& epilogue) {
  require_bf16_products(precision, name);
  const double m = static_cast<double>(M), n = static_cast<double>(N), k = static_cast<double>(K);
  ProfileScope scope("gemm", name, {M, N, K}, 2.0 * m * n * k,
                     static_cast<double>(sizeof(TA)) * m * k + 4.0 * k * n +
                         (2.0 + epilogue_bytes(epilogue)) * m * n);
  GemmEpilogue ep = gemm_epilogue(epilogue, ldc);
  ep.c_bf16 = C_bf16;
  ep.ld_c_bf16 = ldc;
  ep.c_bf16_only = true;
  gemm_bf16(ta, tb, M, N, K, alpha, A, lda, B, ldb, 0.0f, nullptr, ldc, &ep);
}

}  // namespace

void model_gemm(Precision precision, const char* name, Trans ta, Trans tb, int64_t M, int64_t N,
                int64_t K, float alpha, const float* A, int64_t lda, const float* B, int64_t ldb,
                bf16* C_bf16, int64_t ldc, const ProductEpilogue<float>& epilogue) {
  gemm_to_bf16(precision, name, ta, tb, M, N, K, alpha, A, lda, B, ldb, C_bf16, ldc, epilogue);
}

void model_gemm(Precision precision, const char* name, Trans ta, Trans tb, int64_t M, int64_t N,
                int64_t K, float alpha, const bf16* A, int64_t lda, const float* B, int64_t ldb,
                bf16* C_bf16, int64_t ldc, const ProductEpilogue<float>& epilogue) {
  gemm_to_bf16(precision, name, ta, tb, M, N, K, alpha, A, lda, B, ldb, C_bf16, ldc, epilogue);
}

void model_gemm_packed(const char* name, int64_t M, const float* A, const PackedB& B, float beta,
                       float* C, const ProductEpilogue<float>& epilogue) {
  const double m = static_cast<double>(M), n = static_cast<double>(B.N),
               k = static_cast<double>(B.K);
  // Reads A, the packed B (2 or 4 bytes a value) and C when beta reads it; writes C.
  ProfileScope scope("gemm", name, {M, B.N, B.K}, 2.0 * m * n * k,
                     4.0 * (m * k + (beta == 0.0f ? 1.0 : 2.0) * m * n) +
                         epilogue_bytes(epilogue) * m * n + static_cast<double>(B.data.size()));
  const GemmEpilogue ep = gemm_epilogue(epilogue, B.N);
  matmul(Trans::kNo, M, 1.0f, A, B.K, B, beta, C, B.N, epilogue_or_null(epilogue, ep));
}

void model_gemm_packed(const char* name, int64_t M, const bf16* A, const PackedB& B, float beta,
                       float* C, const ProductEpilogue<float>& epilogue) {
  const double m = static_cast<double>(M), n = static_cast<double>(B.N),
               k = static_cast<double>(B.K);
  ProfileScope scope("gemm", name, {M, B.N, B.K}, 2.0 * m * n * k,
                     2.0 * m * k + 4.0 * (beta == 0.0f ? 1.0 : 2.0) * m * n +
                         epilogue_bytes(epilogue) * m * n + static_cast<double>(B.data.size()));
  const GemmEpilogue ep = gemm_epilogue(epilogue, B.N);
  matmul(Trans::kNo, M, 1.0f, A, B.K, B, beta, C, B.N, epilogue_or_null(epilogue, ep));
}

namespace {

template <class TA>
void packed_gemm_to_bf16(const char* name, int64_t M, const TA* A, const PackedB& B, bf16* C_bf16,
                         const ProductEpilogue<float>& epilogue) {
  const double m = static_cast<double>(M), n = static_cast<double>(B.N),
               k = static_cast<double>(B.K);
  ProfileScope scope("gemm", name, {M, B.N, B.K}, 2.0 * m * n * k,
                     static_cast<double>(sizeof(TA)) * m * k +
                         (2.0 + epilogue_bytes(epilogue)) * m * n +
                         static_cast<double>(B.data.size()));
  GemmEpilogue ep = gemm_epilogue(epilogue, B.N);
  ep.c_bf16 = C_bf16;
  ep.ld_c_bf16 = B.N;
  ep.c_bf16_only = true;
  matmul(Trans::kNo, M, 1.0f, A, B.K, B, 0.0f, nullptr, B.N, &ep);
}

}  // namespace

void model_gemm_packed(const char* name, int64_t M, const float* A, const PackedB& B, bf16* C_bf16,
                       const ProductEpilogue<float>& epilogue) {
  packed_gemm_to_bf16(name, M, A, B, C_bf16, epilogue);
}

void model_gemm_packed(const char* name, int64_t M, const bf16* A, const PackedB& B, bf16* C_bf16,
                       const ProductEpilogue<float>& epilogue) {
  packed_gemm_to_bf16(name, M, A, B, C_bf16, epilogue);
}

void model_grouped_gemm_rows(Precision precision, const char* name, const MoePlan& plan,
                             Trans trans_b, int64_t N, int64_t K, const float* A, int64_t lda,
                             const float* B, int64_t ldb, int64_t stride_b, float* C, int64_t ldc,
                             const ProductEpilogue<float>& epilogue) {
  const double m = static_cast<double>(plan.rows()), n = static_cast<double>(N),
               k = static_cast<double>(K), e = static_cast<double>(plan.experts);
  ProfileScope scope("grouped_gemm", name, {plan.rows(), N, K, plan.experts}, 2.0 * m * n * k,
                     4.0 * (m * k + e * k * n + m * n) + epilogue_bytes(epilogue) * m * n);
  if (epilogue.residual != nullptr) {
    throw std::invalid_argument(std::string("model_grouped_gemm_rows: ") + name +
                                ": the experts' rows take no residual");
  }
  const GemmEpilogue ep = gemm_epilogue(epilogue, ldc);
  grouped_gemm_rows(precision, plan.offsets, trans_b, N, K, 1.0f, A, lda, B, ldb, stride_b, 0.0f, C,
                    ldc, &ep);
}

void model_grouped_gemm_reduce(Precision precision, const char* name, const MoePlan& plan,
                               int64_t M, int64_t N, const float* A, int64_t lda, const float* B,
                               int64_t ldb, float* C, int64_t ldc, int64_t stride_c) {
  const double m = static_cast<double>(M), n = static_cast<double>(N),
               r = static_cast<double>(plan.rows()), e = static_cast<double>(plan.experts);
  ProfileScope scope("grouped_gemm", name, {M, N, plan.rows(), plan.experts}, 2.0 * m * n * r,
                     4.0 * (r * m + r * n + 2.0 * e * m * n));
  grouped_gemm_reduce(precision, plan.offsets, M, N, 1.0f, A, lda, B, ldb, 1.0f, C, ldc, stride_c);
}

void model_moe_gather(const MoePlan& plan, int64_t d, const float* X, float* Xe) {
  moe_gather(plan, d, X, d, Xe);
}

void model_moe_gather_backward(const MoePlan& plan, int64_t d, const float* dXe, float* dX) {
  moe_gather_backward(plan, d, dXe, dX, d, true);
}

void model_moe_combine(const MoePlan& plan, int64_t d, const float* Ye, const float* weights,
                       float* Y) {
  moe_combine(plan, d, Ye, weights, Y, d, true);
}

void model_moe_combine_backward(const MoePlan& plan, int64_t d, const float* dY, const float* Ye,
                                const float* weights, float* dYe, float* dweights) {
  moe_combine_backward(plan, d, dY, d, Ye, weights, dYe, dweights);
}

namespace {

// The work of one attention call: flops_per_pair_dim for each pair its masks leave visible
// (documents included) and each dimension of each query head. Counted only when the profiler
// records it: the count walks the queries.
double attention_pair_flops(const AttentionParams& p, double flops_per_pair_dim) {
  if (!Profiler::enabled()) return 0.0;
  return flops_per_pair_dim * static_cast<double>(p.H * p.D) *
         static_cast<double>(attention_visible_pairs(p));
}

// Bytes moved: `query_bytes` per value of the query-sized tensors together (T rows of H·D: 4 for
// each fp32 one, 2 for each bf16 one) and `kv_bytes` per value of the key/value-sized ones
// (T_kv rows of H_kv·D).
double attention_bytes(const AttentionArgs<float>& a, double query_bytes, double kv_bytes) {
  return query_bytes * static_cast<double>(a.T * a.H * a.D) +
         kv_bytes * static_cast<double>(a.T_kv * a.H_kv * a.D);
}

// Bytes per value of an attention input: 2 where it is read in bf16.
double value_bytes(const void* bf16_copy) {
  return bf16_copy != nullptr ? 2.0 : 4.0;
}

}  // namespace

void model_attention_forward(const AttentionArgs<float>& a, float* out, float* lse,
                             bf16* out_rounded) {
  // q; out, its rounded copy or both, as written; k, v, each in fp32 or bf16 as given. QKᵀ and
  // P·V: 4 FLOPs per pair and dimension.
  const AttentionParams p = attention_params(a);
  ProfileScope scope("attention_fwd", "attention.fwd", {a.T, a.H, a.D, a.window_blocks},
                     attention_pair_flops(p, 4.0),
                     attention_bytes(a,
                                     value_bytes(p.q_bf16) + (out != nullptr ? 4.0 : 0.0) +
                                         (out_rounded != nullptr ? 2.0 : 0.0),
                                     value_bytes(p.k_bf16) + value_bytes(p.v_bf16)));
  attention_forward(p, out, lse, out_rounded);
}

void model_attention_backward(const AttentionArgs<float>& a, const float* out, const float* lse,
                              const float* dout, float* dq, float* dk, float* dv,
                              const bf16* dout_rounded, const bf16* out_rounded) {
  // Eight tensors (q, k, v, out, dout in, each in fp32 or bf16 as given; dq, dk, dv out, fp32).
  // The backward's four products plus the recomputed scores (see flop_count.hpp): 10 FLOPs per
  // pair and dimension, 14 where P and dS are recomputed for dQ too.
  const AttentionParams p = attention_params(a);
  const double per_pair =
      Profiler::enabled() && attention_backward_keeps_score_gradients(p) ? 10.0 : 14.0;
  ProfileScope scope(
      "attention_bwd", "attention.bwd", {a.T, a.H, a.D, a.window_blocks},
      attention_pair_flops(p, per_pair),
      attention_bytes(
          a, value_bytes(p.q_bf16) + value_bytes(out_rounded) + value_bytes(dout_rounded) + 4.0,
          value_bytes(p.k_bf16) + value_bytes(p.v_bf16) + 8.0));
  attention_backward(p, out, lse, dout, dq, dk, dv, dout_rounded, out_rounded);
}

double model_loss_forward(const LossArgs<float>& a, float* per_token) {
  const double tvd = static_cast<double>(a.T) * static_cast<double>(a.V * a.d);
  ProfileScope scope("loss_fwd", "lm_head.loss.fwd", {a.T, a.V, a.d}, 2.0 * tvd,
                     4.0 * static_cast<double>(a.T * a.d + a.V * a.d));
  return fused_linear_cross_entropy_forward(loss_params(a), per_token);
}

double model_loss_backward(const LossArgs<float>& a, float* dx, float* dW) {
  // The logits (once), then dx = G·W and dW += Gᵀ·x.
  const double tvd = static_cast<double>(a.T) * static_cast<double>(a.V * a.d);
  ProfileScope scope("loss_bwd", "lm_head.loss.bwd", {a.T, a.V, a.d}, 6.0 * tvd,
                     4.0 * static_cast<double>(2 * a.T * a.d + 3 * a.V * a.d));
  return fused_linear_cross_entropy_backward(loss_params(a), dx, dW);
}

}  // namespace nanogpt
