// float: the model's calls forwarded to the fast kernels.
#include "model/model_kernels.hpp"

#include "kernels/attention.hpp"
#include "kernels/fused_linear_cross_entropy.hpp"

namespace nanogpt {

namespace {

AttentionParams attention_params(const AttentionArgs<float>& a) {
  AttentionParams p;
  p.T = a.T;
  p.H = a.H;
  p.D = a.D;
  p.q = a.q;
  p.k = a.k;
  p.v = a.v;
  p.ld = a.ld;
  p.doc = a.doc;
  p.window_blocks = a.window_blocks;
  p.block_size = a.block_size;
  p.scale = a.scale;
  return p;
}

FusedLossParams loss_params(const LossArgs<float>& a) {
  FusedLossParams p;
  p.T = a.T;
  p.d = a.d;
  p.V = a.V;
  p.x = a.x;
  p.W = a.W;
  p.targets = a.targets;
  p.softcap = a.softcap;
  p.softcap_divisor = a.softcap_divisor;
  p.fp8 = a.fp8;
  p.loss_scale = a.loss_scale;
  p.precision = a.precision;
  return p;
}

}  // namespace

void model_gemm(Precision precision, Trans ta, Trans tb, int64_t M, int64_t N, int64_t K,
                float alpha, const float* A, int64_t lda, const float* B, int64_t ldb, float beta,
                float* C, int64_t ldc) {
  matmul(precision, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

void model_attention_forward(const AttentionArgs<float>& a, float* out, float* lse) {
  attention_forward(attention_params(a), out, lse);
}

void model_attention_backward(const AttentionArgs<float>& a, const float* out, const float* lse,
                              const float* dout, float* dq, float* dk, float* dv) {
  attention_backward(attention_params(a), out, lse, dout, dq, dk, dv);
}

double model_loss_forward(const LossArgs<float>& a, float* per_token) {
  return fused_linear_cross_entropy_forward(loss_params(a), per_token);
}

double model_loss_backward(const LossArgs<float>& a, float* dx, float* dW) {
  return fused_linear_cross_entropy_backward(loss_params(a), dx, dW);
}

}  // namespace nanogpt
