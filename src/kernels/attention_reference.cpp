// The attention references: every (query, key) pair, scores in double, no tiling and no skipping.

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "kernels/attention.hpp"
#include "kernels/attention_mask.hpp"
#include "kernels/attention_shape.hpp"

namespace nanogpt {

namespace {

// Scaled scores of query i (at position offset + i) of head h against every key position, in
// double; hidden keys get -inf.
void reference_scores(const AttentionParams& p, const Shape& sh, const AttentionMask& mask,
                      int64_t h, int64_t i, std::vector<double>& s) {
  s.assign(static_cast<size_t>(sh.T_kv), -std::numeric_limits<double>::infinity());
  const int64_t pos = sh.offset + i;
  const float* qi = p.q + i * sh.ld_q + h * p.D;
  for (int64_t j = 0; j <= pos; ++j) {
    if (!mask.visible(pos, j)) continue;
    const float* kj = p.k + j * sh.ld_kv + sh.kv_head(h) * p.D;
    double dot = 0;
    for (int64_t e = 0; e < p.D; ++e) dot += static_cast<double>(qi[e]) * kj[e];
    s[static_cast<size_t>(j)] = static_cast<double>(p.scale) * dot;
  }
}

// Turns the scores of the query at position pos into probabilities in place; returns the
// log-sum-exp.
double reference_softmax(int64_t pos, std::vector<double>& s) {
  double m = -std::numeric_limits<double>::infinity();
  for (int64_t j = 0; j <= pos; ++j) m = std::max(m, s[static_cast<size_t>(j)]);
  double sum = 0;
  for (int64_t j = 0; j <= pos; ++j) sum += std::exp(s[static_cast<size_t>(j)] - m);
  for (int64_t j = 0; j <= pos; ++j) {
    s[static_cast<size_t>(j)] = std::exp(s[static_cast<size_t>(j)] - m) / sum;
  }
  return m + std::log(sum);
}

}  // namespace

void attention_forward_reference(const AttentionParams& p, float* out, float* lse) {
  validate_tensors(p, "attention_forward_reference");
  const Shape sh = shape_of(p);
  const AttentionMask mask(p);
  const int64_t hd = p.H * p.D;
  std::vector<double> s, o(static_cast<size_t>(p.D));
  for (int64_t h = 0; h < p.H; ++h) {
    const int64_t kv = sh.kv_head(h);
    for (int64_t i = 0; i < p.T; ++i) {
      const int64_t pos = sh.offset + i;
      reference_scores(p, sh, mask, h, i, s);
      lse[h * p.T + i] = static_cast<float>(reference_softmax(pos, s));
      std::fill(o.begin(), o.end(), 0.0);
      for (int64_t j = 0; j <= pos; ++j) {
        const double pij = s[static_cast<size_t>(j)];
        if (pij == 0) continue;
        const float* vj = p.v + j * sh.ld_kv + kv * p.D;
        for (int64_t e = 0; e < p.D; ++e) o[static_cast<size_t>(e)] += pij * vj[e];
      }
      for (int64_t e = 0; e < p.D; ++e) {
        out[i * hd + h * p.D + e] = static_cast<float>(o[static_cast<size_t>(e)]);
      }
    }
  }
}

void attention_backward_reference(const AttentionParams& p, const float* dout, float* dq, float* dk,
                                  float* dv) {
  validate_backward(p, "attention_backward_reference");
  const Shape sh = shape_of(p);
  const AttentionMask mask(p);
  const int64_t T = p.T, D = p.D, hd = p.H * p.D;
  const double scale = p.scale;
  std::vector<double> s, dp(static_cast<size_t>(T));
  std::vector<double> gq(static_cast<size_t>(T * D)), gk(gq.size()), gv(gq.size());
  for (int64_t kv = 0; kv < sh.H_kv; ++kv) {
    std::fill(gk.begin(), gk.end(), 0.0);
    std::fill(gv.begin(), gv.end(), 0.0);
    for (int64_t h = kv * sh.per_group; h < (kv + 1) * sh.per_group; ++h) {
      std::fill(gq.begin(), gq.end(), 0.0);
      for (int64_t i = 0; i < T; ++i) {
        reference_scores(p, sh, mask, h, i, s);
        reference_softmax(i, s);
        const float* doi = dout + i * hd + h * D;
        // Delta from P and dP, not from the forward output, so this path shares nothing with
        // the kernel's dO·O.
        double delta = 0;
        for (int64_t j = 0; j <= i; ++j) {
          double d = 0;
          if (s[static_cast<size_t>(j)] != 0) {
            const float* vj = p.v + j * sh.ld_kv + kv * D;
            for (int64_t e = 0; e < D; ++e) d += static_cast<double>(doi[e]) * vj[e];
          }
          dp[static_cast<size_t>(j)] = d;
          delta += s[static_cast<size_t>(j)] * d;
        }
        const float* qi = p.q + i * sh.ld_q + h * D;
        for (int64_t j = 0; j <= i; ++j) {
          const double pij = s[static_cast<size_t>(j)];
          if (pij == 0) continue;
          const double ds = scale * pij * (dp[static_cast<size_t>(j)] - delta);
          const float* kj = p.k + j * sh.ld_kv + kv * D;
          for (int64_t e = 0; e < D; ++e) {
            gq[static_cast<size_t>(i * D + e)] += ds * kj[e];
            gk[static_cast<size_t>(j * D + e)] += ds * qi[e];
            gv[static_cast<size_t>(j * D + e)] += pij * doi[e];
          }
        }
      }
      for (int64_t t = 0; t < T; ++t) {
        for (int64_t e = 0; e < D; ++e) {
          dq[t * sh.ld_q + h * D + e] = static_cast<float>(gq[static_cast<size_t>(t * D + e)]);
        }
      }
    }
    for (int64_t t = 0; t < T; ++t) {
      for (int64_t e = 0; e < D; ++e) {
        const size_t idx = static_cast<size_t>(t * D + e);
        dk[t * sh.ld_kv + kv * D + e] = static_cast<float>(gk[idx]);
        dv[t * sh.ld_kv + kv * D + e] = static_cast<float>(gv[idx]);
      }
    }
  }
}

}  // namespace nanogpt
