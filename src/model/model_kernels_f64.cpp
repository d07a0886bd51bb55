// double: plain float64 references of every kernel the model calls. They materialise what
// the fast kernels avoid (T×T scores, T×V logits) and are only meant for small numerical
// checks such as the model's finite-difference test.
#include <algorithm>
#include <cmath>
#include <vector>

#include "model/model_kernels.hpp"
#include "runtime/error.hpp"

namespace nanogpt {

namespace {

double at(const double* X, int64_t ld, Trans t, int64_t r, int64_t c) {
  return t == Trans::kNo ? X[r * ld + c] : X[c * ld + r];
}

// Query i sits at position T_kv − T + i; it sees the key at position j iff j is not after it,
// in its document and within the window.
bool visible(const AttentionArgs<double>& a, int64_t i, int64_t j) {
  const int64_t qi = a.T_kv - a.T + i;
  return j <= qi && a.doc[qi] == a.doc[j] && qi / a.block_size - j / a.block_size < a.window_blocks;
}

// Query head h reads key/value head h / (H / H_kv): its elements' offset in a row of k, v.
int64_t kv_head(const AttentionArgs<double>& a, int64_t h) {
  return h / (a.H / a.H_kv) * a.D;
}

// Probabilities of query i, head h over key positions 0..T_kv − 1 (zero where masked).
void attention_row(const AttentionArgs<double>& a, int64_t h, int64_t i, std::vector<double>& p) {
  p.assign(static_cast<size_t>(a.T_kv), 0.0);
  double mx = -INFINITY;
  for (int64_t j = 0; j < a.T_kv; ++j) {
    if (!visible(a, i, j)) continue;
    double s = 0;
    for (int64_t e = 0; e < a.D; ++e)
      s += a.q[i * a.ld_q + h * a.D + e] * a.k[j * a.ld_kv + kv_head(a, h) + e];
    p[static_cast<size_t>(j)] = s * static_cast<double>(a.scale);
    mx = std::max(mx, p[static_cast<size_t>(j)]);
  }
  double sum = 0;
  for (int64_t j = 0; j < a.T_kv; ++j) {
    if (!visible(a, i, j)) continue;
    p[static_cast<size_t>(j)] = std::exp(p[static_cast<size_t>(j)] - mx);
    sum += p[static_cast<size_t>(j)];
  }
  for (int64_t j = 0; j < a.T_kv; ++j)
    p[static_cast<size_t>(j)] = visible(a, i, j) ? p[static_cast<size_t>(j)] / sum : 0.0;
}

double capped(const LossArgs<double>& a, int64_t t, int64_t v, double* dcap) {
  double z = 0;
  for (int64_t e = 0; e < a.d; ++e) z += a.x[t * a.d + e] * a.W[v * a.d + e];
  const double s = 1.0 / (1.0 + std::exp(-z / a.softcap_divisor));
  if (dcap != nullptr) *dcap = a.softcap * s * (1 - s) / a.softcap_divisor;
  return a.softcap * s;
}

}  // namespace

void model_gemm(Precision, const char*, Trans ta, Trans tb, int64_t M, int64_t N, int64_t K,
                double alpha, const double* A, int64_t lda, const double* B, int64_t ldb,
                double beta, double* C, int64_t ldc) {
  for (int64_t i = 0; i < M; ++i) {
    for (int64_t j = 0; j < N; ++j) {
      double sum = 0;
      for (int64_t k = 0; k < K; ++k) sum += at(A, lda, ta, i, k) * at(B, ldb, tb, k, j);
      C[i * ldc + j] = alpha * sum + (beta == 0.0 ? 0.0 : beta * C[i * ldc + j]);
    }
  }
}

void model_gemm(Precision precision, const char* name, Trans ta, Trans tb, int64_t M, int64_t N,
                int64_t K, double alpha, const double* A, int64_t lda, const double* B, int64_t ldb,
                double beta, double* C, int64_t ldc, const ProductEpilogue<double>& epilogue) {
  model_gemm(precision, name, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
  for (int64_t i = 0; i < M; ++i) {
    for (int64_t j = 0; j < N; ++j) {
      double& c = C[i * ldc + j];
      if (epilogue.residual != nullptr) c += epilogue.residual[i * ldc + j];
      if (epilogue.relu_squared_output != nullptr) {
        const double h = epilogue.relu_squared_output[i * epilogue.ld + j];
        c = h > 0.0 ? 2.0 * std::sqrt(h) * c : 0.0;
      }
      if (epilogue.relu_squared) {
        const double r = std::max(c, 0.0);
        c = r * r;
      }
    }
  }
}

// The experts' products: each group's rows through the reference product above.
void model_grouped_gemm_rows(Precision precision, const char* name, const MoePlan& plan,
                             Trans trans_b, int64_t N, int64_t K, const double* A, int64_t lda,
                             const double* B, int64_t ldb, int64_t stride_b, double* C, int64_t ldc,
                             const ProductEpilogue<double>& epilogue) {
  for (int64_t g = 0; g < plan.experts; ++g) {
    const int64_t r0 = plan.offsets[static_cast<size_t>(g)];
    const int64_t rows = plan.offsets[static_cast<size_t>(g) + 1] - r0;
    if (rows == 0) continue;
    ProductEpilogue<double> ep = epilogue;
    if (ep.relu_squared_output != nullptr) ep.relu_squared_output += r0 * ep.ld;
    model_gemm(precision, name, Trans::kNo, trans_b, rows, N, K, 1.0, A + r0 * lda, lda,
               B + g * stride_b, ldb, 0.0, C + r0 * ldc, ldc, ep);
  }
}

void model_grouped_gemm_reduce(Precision precision, const char* name, const MoePlan& plan,
                               int64_t M, int64_t N, const double* A, int64_t lda, const double* B,
                               int64_t ldb, double* C, int64_t ldc, int64_t stride_c) {
  for (int64_t g = 0; g < plan.experts; ++g) {
    const int64_t r0 = plan.offsets[static_cast<size_t>(g)];
    const int64_t rows = plan.offsets[static_cast<size_t>(g) + 1] - r0;
    if (rows == 0) continue;
    model_gemm(precision, name, Trans::kYes, Trans::kNo, M, N, rows, 1.0, A + r0 * lda, lda,
               B + r0 * ldb, ldb, 1.0, C + g * stride_c, ldc);
  }
}

void model_moe_gather(const MoePlan& plan, int64_t d, const double* X, double* Xe) {
  for (int64_t r = 0; r < plan.rows(); ++r) {
    const int64_t t = plan.entry_of_row[static_cast<size_t>(r)] / plan.top_k;
    for (int64_t j = 0; j < d; ++j) Xe[r * d + j] = X[t * d + j];
  }
}

void model_moe_gather_backward(const MoePlan& plan, int64_t d, const double* dXe, double* dX) {
  for (int64_t r = 0; r < plan.rows(); ++r) {
    const int64_t t = plan.entry_of_row[static_cast<size_t>(r)] / plan.top_k;
    for (int64_t j = 0; j < d; ++j) dX[t * d + j] += dXe[r * d + j];
  }
}

void model_moe_combine(const MoePlan& plan, int64_t d, const double* Ye, const double* weights,
                       double* Y) {
  for (int64_t i = 0; i < plan.rows(); ++i) {
    const int64_t r = plan.row_of_entry[static_cast<size_t>(i)], t = i / plan.top_k;
    for (int64_t j = 0; j < d; ++j) Y[t * d + j] += weights[i] * Ye[r * d + j];
  }
}

void model_moe_combine_backward(const MoePlan& plan, int64_t d, const double* dY, const double* Ye,
                                const double* weights, double* dYe, double* dweights) {
  for (int64_t i = 0; i < plan.rows(); ++i) {
    const int64_t r = plan.row_of_entry[static_cast<size_t>(i)], t = i / plan.top_k;
    double dw = 0;
    for (int64_t j = 0; j < d; ++j) {
      dYe[r * d + j] = weights[i] * dY[t * d + j];
      dw += dY[t * d + j] * Ye[r * d + j];
    }
    dweights[i] = dw;
  }
}

void model_attention_forward(const AttentionArgs<double>& a, double* out, double* lse,
                             bf16* out_rounded) {
  if (out_rounded != nullptr) {
    throw Error("model_attention_forward: a bf16 output (out_rounded) is for float models");
  }
  std::vector<double> p;
  for (int64_t h = 0; h < a.H; ++h) {
    for (int64_t i = 0; i < a.T; ++i) {
      attention_row(a, h, i, p);
      for (int64_t e = 0; e < a.D; ++e) {
        double y = 0;
        for (int64_t j = 0; j < a.T_kv; ++j)
          y += p[static_cast<size_t>(j)] * a.v[j * a.ld_kv + kv_head(a, h) + e];
        out[i * a.H * a.D + h * a.D + e] = y;
      }
      lse[h * a.T + i] = 0;  // unused by this reference's backward
    }
  }
}

void model_attention_backward(const AttentionArgs<double>& a, const double*, const double*,
                              const double* dout, double* dq, double* dk, double* dv,
                              const bf16* dout_rounded, const bf16* out_rounded) {
  if (a.T_kv != a.T) throw Error("attention backward: needs T_kv == T (training)");
  if (dout_rounded != nullptr || out_rounded != nullptr) {
    throw Error(
        "model_attention_backward: a bf16 dout or out (dout_rounded, out_rounded) is for float "
        "models");
  }
  for (int64_t i = 0; i < a.T; ++i) {
    for (int64_t e = 0; e < a.H * a.D; ++e) dq[i * a.ld_q + e] = 0;
    for (int64_t e = 0; e < a.H_kv * a.D; ++e) dk[i * a.ld_kv + e] = dv[i * a.ld_kv + e] = 0;
  }
  std::vector<double> p, dp;
  for (int64_t h = 0; h < a.H; ++h) {
    const int64_t g = kv_head(a, h);
    for (int64_t i = 0; i < a.T; ++i) {
      attention_row(a, h, i, p);
      const double* go = dout + i * a.H * a.D + h * a.D;
      dp.assign(p.size(), 0.0);
      double dot = 0;
      for (int64_t j = 0; j <= i; ++j) {
        if (p[static_cast<size_t>(j)] == 0.0) continue;
        double gj = 0;
        for (int64_t e = 0; e < a.D; ++e) {
          gj += go[e] * a.v[j * a.ld_kv + g + e];
          dv[j * a.ld_kv + g + e] += p[static_cast<size_t>(j)] * go[e];
        }
        dp[static_cast<size_t>(j)] = gj;
        dot += p[static_cast<size_t>(j)] * gj;
      }
      for (int64_t j = 0; j <= i; ++j) {
        if (p[static_cast<size_t>(j)] == 0.0) continue;
        const double ds = p[static_cast<size_t>(j)] * (dp[static_cast<size_t>(j)] - dot) * a.scale;
        for (int64_t e = 0; e < a.D; ++e) {
          dq[i * a.ld_q + h * a.D + e] += ds * a.k[j * a.ld_kv + g + e];
          dk[j * a.ld_kv + g + e] += ds * a.q[i * a.ld_q + h * a.D + e];
        }
      }
    }
  }
}

namespace {

// The tempered logits y/τ of row t (and d(y/τ)/dz in dcap, if given).
void tempered_row(const LossArgs<double>& a, int64_t t, std::vector<double>& y,
                  std::vector<double>* dcap) {
  const double inv_t = 1.0 / static_cast<double>(a.temperature);
  for (int64_t v = 0; v < a.V; ++v) {
    double d = 0;
    y[static_cast<size_t>(v)] = capped(a, t, v, &d) * inv_t;
    if (dcap != nullptr) (*dcap)[static_cast<size_t>(v)] = d * inv_t;
  }
}

double row_weight(const LossArgs<double>& a, int64_t t) {
  return a.row_weights != nullptr ? a.row_weights[t] : 1.0;
}

}  // namespace

double model_loss_forward(const LossArgs<double>& a, double* per_token) {
  if (a.fp8) throw Error("the float64 reference head has no FP8 mode");
  double total = 0;
  std::vector<double> y(static_cast<size_t>(a.V));
  for (int64_t t = 0; t < a.T; ++t) {
    tempered_row(a, t, y, nullptr);
    double mx = -INFINITY;
    for (int64_t v = 0; v < a.V; ++v) mx = std::max(mx, y[static_cast<size_t>(v)]);
    double sum = 0;
    for (int64_t v = 0; v < a.V; ++v) sum += std::exp(y[static_cast<size_t>(v)] - mx);
    const double lse = mx + std::log(sum);
    const double loss = lse - y[static_cast<size_t>(a.targets[t])];
    if (per_token != nullptr) per_token[t] = loss;
    if (a.entropy != nullptr) {
      double h = 0;
      for (int64_t v = 0; v < a.V; ++v) {
        const double logp = y[static_cast<size_t>(v)] - lse;
        h -= std::exp(logp) * logp;
      }
      a.entropy[t] = h;
    }
    total += row_weight(a, t) * loss;
  }
  return total;
}

double model_loss_backward(const LossArgs<double>& a, double* dx, double* dW) {
  const double total = model_loss_forward(a, nullptr);
  std::vector<double> y(static_cast<size_t>(a.V)), dcap(static_cast<size_t>(a.V));
  for (int64_t t = 0; t < a.T; ++t) {
    tempered_row(a, t, y, &dcap);
    double mx = -INFINITY;
    for (int64_t v = 0; v < a.V; ++v) mx = std::max(mx, y[static_cast<size_t>(v)]);
    double sum = 0;
    for (int64_t v = 0; v < a.V; ++v) sum += std::exp(y[static_cast<size_t>(v)] - mx);
    for (int64_t e = 0; e < a.d; ++e) dx[t * a.d + e] = 0;
    for (int64_t v = 0; v < a.V; ++v) {
      const double prob = std::exp(y[static_cast<size_t>(v)] - mx) / sum;
      const double g = (prob - (v == a.targets[t] ? 1.0 : 0.0)) * dcap[static_cast<size_t>(v)] *
                       a.loss_scale * row_weight(a, t);
      for (int64_t e = 0; e < a.d; ++e) {
        dx[t * a.d + e] += g * a.W[v * a.d + e];
        dW[v * a.d + e] += g * a.x[t * a.d + e];
      }
    }
  }
  return total;
}

}  // namespace nanogpt
