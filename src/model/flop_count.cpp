#include "model/flop_count.hpp"

#include <algorithm>
#include <string>

#include "kernels/attention.hpp"
#include "model/qkv_shape.hpp"
#include "runtime/error.hpp"

namespace nanogpt {

FlopCount& FlopCount::operator+=(const FlopCount& o) {
  linear_fwd += o.linear_fwd;
  linear_bwd += o.linear_bwd;
  attention_fwd += o.attention_fwd;
  attention_bwd += o.attention_bwd;
  attention_bwd_recompute += o.attention_bwd_recompute;
  lm_head_fwd += o.lm_head_fwd;
  lm_head_bwd += o.lm_head_bwd;
  newton_schulz += o.newton_schulz;
  return *this;
}

FlopCount FlopCount::scaled(double f) const {
  FlopCount c = *this;
  for (double* v : {&c.linear_fwd, &c.linear_bwd, &c.attention_fwd, &c.attention_bwd,
                    &c.attention_bwd_recompute, &c.lm_head_fwd, &c.lm_head_bwd, &c.newton_schulz}) {
    *v *= f;
  }
  return c;
}

nlohmann::ordered_json FlopCount::to_json() const {
  nlohmann::ordered_json j;
  j["linear_fwd"] = linear_fwd;
  j["linear_bwd"] = linear_bwd;
  j["attention_fwd"] = attention_fwd;
  j["attention_bwd"] = attention_bwd;
  j["attention_bwd_recompute"] = attention_bwd_recompute;
  j["lm_head_fwd"] = lm_head_fwd;
  j["lm_head_bwd"] = lm_head_bwd;
  j["newton_schulz"] = newton_schulz;
  return j;
}

int64_t attention_window_blocks(const Config& c, int64_t layer, int64_t window_blocks) {
  if (!c.has_attention(layer)) return 0;
  return c.layer_window_blocks(layer, window_blocks);
}

std::vector<int64_t> layer_windows(const Config& c, int64_t window_blocks) {
  std::vector<int64_t> w;
  for (int64_t i = 0; i < c.num_layers; ++i)
    w.push_back(attention_window_blocks(c, i, window_blocks));
  return w;
}

int64_t attention_pairs(int64_t T, int64_t window_blocks, int64_t block_size) {
  if (T < 0 || window_blocks < 1 || block_size < 1) {
    throw Error("attention_pairs: need T >= 0, window_blocks >= 1 and block_size >= 1 (T=" +
                std::to_string(T) + ", window_blocks=" + std::to_string(window_blocks) +
                ", block_size=" + std::to_string(block_size) + ")");
  }
  // Query i in block b sees keys from the start of block b − W + 1 (or 0) up to itself; sum
  // that range per block of queries in closed form.
  int64_t pairs = 0;
  for (int64_t b0 = 0; b0 < T; b0 += block_size) {
    const int64_t b = b0 / block_size;
    const int64_t first_key = std::max<int64_t>(0, (b - window_blocks + 1) * block_size);
    const int64_t last_query = std::min(T, b0 + block_size) - 1;
    const int64_t n = last_query - b0 + 1;
    // Σ_{i=b0}^{last} (i − first_key + 1)
    pairs += n * (b0 - first_key + 1) + n * (n - 1) / 2;
  }
  return pairs;
}

bool attention_keeps_score_gradients(const Config& c, int64_t T, int64_t window_blocks) {
  const QkvShape qkv = qkv_shape(c);
  const std::vector<int32_t> one_doc(static_cast<size_t>(T), 0);
  AttentionParams p;
  p.T = T;
  p.H = qkv.Hq;
  p.H_kv = qkv.Hkv;
  p.D = qkv.D;
  p.ld = qkv.row();
  p.doc = one_doc.data();
  p.window_blocks = window_blocks;
  p.block_size = c.block_size;
  p.precision = resolved_precision(c);
  return attention_backward_keeps_score_gradients(p);
}

FlopCount sequence_flops(const Config& c, int64_t T, int64_t window_blocks, bool backward) {
  const double t = static_cast<double>(T), d = static_cast<double>(c.model_dim);
  const QkvShape qkv = qkv_shape(c);
  const double hd = static_cast<double>(qkv.q_width());
  const double qkv_rows = static_cast<double>(qkv.row());
  // Scores and the weighted sum run per query head (K/V heads are read, not copied, by a group).
  const double per_pair = static_cast<double>(c.num_heads * c.head_dim);
  FlopCount f;
  for (int64_t i = 0; i < c.num_layers; ++i) {
    if (c.is_moe_layer(i)) {
      // The router, and each token's k experts' c_fc and c_proj (only the routed rows).
      const double hidden = static_cast<double>(c.moe_hidden());
      f.linear_fwd += 2 * t * d * static_cast<double>(c.num_experts);
      f.linear_fwd += 2 * t * static_cast<double>(c.experts_per_token) * (2 * d * hidden);
    } else {
      f.linear_fwd += 2 * t * (d * 4 * d + 4 * d * d);
    }
    const int64_t w = attention_window_blocks(c, i, window_blocks);
    if (w == 0) continue;
    f.linear_fwd += 2 * t * (d * qkv_rows + hd * d);
    const double pairs = static_cast<double>(attention_pairs(T, w, c.block_size));
    f.attention_fwd += 4 * per_pair * pairs;
    if (backward) {
      f.attention_bwd += 8 * per_pair * pairs;
      f.attention_bwd_recompute +=
          (attention_keeps_score_gradients(c, T, w) ? 2 : 6) * per_pair * pairs;
    }
  }
  const double head = 2 * t * static_cast<double>(c.vocab_padded()) * d;
  f.lm_head_fwd = head;
  if (backward) {
    f.linear_bwd = 2 * f.linear_fwd;
    f.lm_head_bwd = 2 * head;
  }
  return f;
}

}  // namespace nanogpt
