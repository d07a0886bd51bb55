#include "model/decoder.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/fused_linear_cross_entropy.hpp"
#include "kernels/matmul.hpp"
#include "kernels/relu_squared.hpp"
#include "kernels/rmsnorm.hpp"
#include "runtime/error.hpp"

namespace nanogpt {

namespace {

// y[out] = W[out, in] · x[in], as the M = 1 case of the forward GEMM, in the model's
// precision so the cache reproduces a full forward.
void matvec(Precision precision, const float* W, const float* x, float* y, int64_t out, int64_t in,
            float beta) {
  matmul(precision, Trans::kNo, Trans::kYes, 1, out, in, 1.0f, x, in, W, in, beta, y, out);
}

}  // namespace

GptDecoder::GptDecoder(const Gpt& model, int64_t max_tokens, int64_t window_blocks)
    : model_(model),
      c_(model.config()),
      max_tokens_(max_tokens),
      window_blocks_(window_blocks),
      rotary_(max_tokens, model.config().head_dim) {
  const int64_t d = c_.model_dim, HD = c_.num_heads * c_.head_dim, L = c_.num_layers;
  docs_.resize(static_cast<size_t>(max_tokens));
  k_cache_.resize(static_cast<size_t>(L));
  v_cache_.resize(static_cast<size_t>(L));
  for (int64_t i = 0; i < L; ++i) {
    if (!c_.has_attention(i)) continue;
    k_cache_[static_cast<size_t>(i)].resize(static_cast<size_t>(max_tokens * HD));
    v_cache_[static_cast<size_t>(i)].resize(static_cast<size_t>(max_tokens * HD));
  }
  skip_.assign(static_cast<size_t>(L / 2), std::vector<float>(static_cast<size_t>(d)));
  x0_.resize(static_cast<size_t>(d));
  x_.resize(static_cast<size_t>(d));
  norm_.resize(static_cast<size_t>(d));
  qkv_.resize(static_cast<size_t>(3 * HD));
  att_.resize(static_cast<size_t>(HD));
  hidden_.resize(static_cast<size_t>(4 * d));
  rstd_qk_.resize(static_cast<size_t>(2 * c_.num_heads));
  scores_.resize(static_cast<size_t>(max_tokens));
  logits_.resize(static_cast<size_t>(c_.vocab_padded()));
}

const std::vector<float>& GptDecoder::step(int32_t token) {
  if (pos_ >= max_tokens_) {
    throw InputError("the decoder's context is full (" + std::to_string(max_tokens_) +
                     " tokens); ask for fewer tokens or a longer context");
  }
  if (token < 0 || token >= c_.vocab_size) {
    throw InputError("token id " + std::to_string(token) + " is outside the vocabulary");
  }
  const int64_t d = c_.model_dim, H = c_.num_heads, D = c_.head_dim, HD = H * D;
  const int64_t L = c_.num_layers, n = L / 2, t = pos_;
  const ParameterSet& P = model_.params();
  auto block = [&](int64_t i, const char* s) {
    return P.data("blocks." + std::to_string(i) + "." + s);
  };
  if (token == c_.eot_id) ++doc_;
  docs_[static_cast<size_t>(t)] = doc_;

  float rstd;
  std::memcpy(x0_.data(), P.data("embed.weight") + token * d, d * sizeof(float));
  rmsnorm_forward(x0_.data(), d, x0_.data(), d, &rstd, 1, d);
  std::memcpy(x_.data(), x0_.data(), d * sizeof(float));

  for (int64_t i = 0; i < L; ++i) {
    if (i >= n) {
      const float s = P.data("skip_weights")[i - n];
      const float* src = skip_[static_cast<size_t>(L - 1 - i)].data();
      for (int64_t e = 0; e < d; ++e) x_[e] += s * src[e];
    }
    const float* lam = block(i, "lambdas");
    for (int64_t e = 0; e < d; ++e) x_[e] = lam[0] * x_[e] + lam[1] * x0_[e];
    if (c_.has_attention(i)) {
      rmsnorm_forward(x_.data(), d, norm_.data(), d, &rstd, 1, d);
      matvec(model_.precision(), block(i, "attn.qkv_w"), norm_.data(), qkv_.data(), 3 * HD, d,
             0.0f);
      rmsnorm_forward(qkv_.data(), D, qkv_.data(), D, rstd_qk_.data(), 2 * H, D);
      rotary_.apply(qkv_.data(), 2 * H, t);
      const float* la = block(i, "attn.lambdas");
      const int ve_index = c_.value_embed_index(i);
      const float* ve =
          ve_index < 0 ? nullptr
                       : P.data("value_embeds." + std::to_string(ve_index) + ".weight") + token * d;
      float* kc = k_cache_[static_cast<size_t>(i)].data();
      float* vc = v_cache_[static_cast<size_t>(i)].data();
      std::memcpy(kc + t * HD, qkv_.data() + HD, HD * sizeof(float));
      for (int64_t e = 0; e < HD; ++e) {
        vc[t * HD + e] = la[0] * qkv_[2 * HD + e] + (ve != nullptr ? la[1] * ve[e] : 0.0f);
      }
      // Keys this query may see: same document, within the window, not in the future.
      const int64_t W = model_.layer_window(i, window_blocks_);
      const int64_t first_block = std::max<int64_t>(0, t / c_.block_size - W + 1);
      int64_t j0 = first_block * c_.block_size;
      while (docs_[static_cast<size_t>(j0)] != doc_) ++j0;  // docs are nondecreasing
      const float scale = static_cast<float>(c_.attn_scale);
      for (int64_t h = 0; h < H; ++h) {
        const float* q = qkv_.data() + h * D;
        float mx = -INFINITY;
        for (int64_t j = j0; j <= t; ++j) {
          const float* k = kc + j * HD + h * D;
          float s = 0;
          for (int64_t e = 0; e < D; ++e) s += q[e] * k[e];
          s *= scale;
          scores_[static_cast<size_t>(j)] = s;
          mx = std::max(mx, s);
        }
        double sum = 0;
        for (int64_t j = j0; j <= t; ++j) {
          float p = std::exp(scores_[static_cast<size_t>(j)] - mx);
          scores_[static_cast<size_t>(j)] = p;
          sum += p;
        }
        float* y = att_.data() + h * D;
        std::fill(y, y + D, 0.0f);
        for (int64_t j = j0; j <= t; ++j) {
          const float p = static_cast<float>(scores_[static_cast<size_t>(j)] / sum);
          const float* v = vc + j * HD + h * D;
          for (int64_t e = 0; e < D; ++e) y[e] += p * v[e];
        }
      }
      matvec(model_.precision(), block(i, "attn.c_proj.weight"), att_.data(), x_.data(), d, HD,
             1.0f);
    }
    rmsnorm_forward(x_.data(), d, norm_.data(), d, &rstd, 1, d);
    matvec(model_.precision(), block(i, "mlp.c_fc.weight"), norm_.data(), hidden_.data(), 4 * d, d,
           0.0f);
    relu_squared_forward(hidden_.data(), hidden_.data(), 4 * d);
    matvec(model_.precision(), block(i, "mlp.c_proj.weight"), hidden_.data(), x_.data(), d, 4 * d,
           1.0f);
    if (i < n) std::memcpy(skip_[static_cast<size_t>(i)].data(), x_.data(), d * sizeof(float));
  }
  rmsnorm_forward(x_.data(), d, norm_.data(), d, &rstd, 1, d);
  FusedLossParams p;
  p.T = 1;
  p.d = d;
  p.V = c_.vocab_padded();
  p.x = norm_.data();
  p.W = P.data("lm_head.weight");
  p.softcap = static_cast<float>(c_.logit_softcap);
  p.softcap_divisor = static_cast<float>(7.5 * std::sqrt(static_cast<double>(d)));
  p.fp8 = c_.fp8_head;
  p.precision = model_.precision();
  capped_logits(p, logits_.data());
  ++pos_;
  return logits_;
}

}  // namespace nanogpt
