// FLOPs of the model's matrix products, counted from the shapes of a Config the way our code
// runs them, so a measured step time turns into a rate (`nanogpt bench train`, the profiler).
// A multiply-add is 2 FLOPs. Element-wise work (norms, rotary, softmax exponentials, relu²,
// the optimizers' element-wise updates) is not counted: it is a few FLOPs per element against
// hundreds per element in the products.
//
// What is counted, per sequence of T tokens (d = model_dim, HD = num_heads·head_dim, Vp =
// vocab_padded):
//   linear_fwd     2·T·(d·3HD + HD·d) per attention layer (qkv, attn.c_proj) and
//                  2·T·(d·4d + 4d·d) per layer (mlp.c_fc, mlp.c_proj); in a MoE layer
//                  2·T·(d·E + k·2·d·hidden) (the router; each token's k experts)
//   linear_bwd     2 × linear_fwd: the input gradient and the weight gradient
//   attention_fwd  QKᵀ and P·V: 4·head_dim·num_heads per visible (query, key) pair
//   attention_bwd  dP = dO·Vᵀ, dV = Pᵀ·dO, dK = dSᵀ·Q, dQ = dS·K: 8·head_dim·num_heads per pair
//   attention_bwd_recompute
//                  what our backward does on top, having kept no T×T scores: pass A (dK, dV)
//                  recomputes S = QKᵀ (2·head_dim·num_heads per pair) and keeps dS for pass B
//                  (dQ); where that would pass its budget (attention_backward_keeps_score_
//                  gradients), pass B recomputes S and dP too: 6·head_dim·num_heads per pair
//   lm_head_fwd    the logits, 2·T·Vp·d (in training the fused loss's backward computes them,
//                  once: it keeps a row block's logits and forms the gradient from them)
//   lm_head_bwd    dx = G·W and dW = Gᵀ·x: 4·T·Vp·d
// and per optimizer step
//   newton_schulz  Muon's orthogonalisation of every matrix (q, k, v and each expert's one by one),
//   filled in by the
//                  optimizer's count (muon_newton_schulz_flops, src/optim/gpt_optimizer.hpp);
//                  train_step_flops (src/train/train_step.hpp) adds it to a step's model FLOPs.
//
// Visible pairs are those the causal and sliding-window masks leave (Gpt::layer_window: long
// layers see W blocks, short ones max(1, W/2)), for a sequence that is one document. The kernel
// also skips pairs across document boundaries, so on real data it does somewhat less than
// counted; it also computes whole tiles on the window's and documents' edges and whole
// micro-tiles on the causal diagonal, so somewhat more.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <vector>

#include "config/config.hpp"

namespace nanogpt {

struct FlopCount {
  double linear_fwd = 0, linear_bwd = 0;
  double attention_fwd = 0, attention_bwd = 0, attention_bwd_recompute = 0;
  double lm_head_fwd = 0, lm_head_bwd = 0;
  double newton_schulz = 0;

  double forward() const { return linear_fwd + attention_fwd + lm_head_fwd; }
  // Forward and backward without recomputation or optimizer: the usual "model FLOPs"
  // (≈ 3 × forward), comparable with other implementations.
  double model() const { return forward() + linear_bwd + attention_bwd + lm_head_bwd; }
  // Everything our step multiplies out, recomputation and Newton–Schulz included.
  double total() const { return model() + attention_bwd_recompute + newton_schulz; }
  FlopCount& operator+=(const FlopCount& o);
  FlopCount scaled(double factor) const;
  nlohmann::ordered_json to_json() const;
};

// Window in blocks of `layer` when the long layers' window is window_blocks
// (Config::layer_window_blocks, as the model attends); 0 for an attention-free layer.
int64_t attention_window_blocks(const Config& config, int64_t layer, int64_t window_blocks);
std::vector<int64_t> layer_windows(const Config& config, int64_t window_blocks);

// (query, key) pairs with key ≤ query and query_block − key_block < window_blocks, in one
// sequence of T tokens.
int64_t attention_pairs(int64_t T, int64_t window_blocks, int64_t block_size);

// Whether the attention backward of one sequence of T tokens (one document) keeps its score
// gradients for dQ with this config's heads, window and precision (attention.hpp).
bool attention_keeps_score_gradients(const Config& config, int64_t T, int64_t window_blocks);

// One sequence of seq_len tokens: the forward (as evaluation runs it) or, with backward, the
// forward and backward of training (no optimizer).
FlopCount sequence_flops(const Config& config, int64_t seq_len, int64_t window_blocks,
                         bool backward);

}  // namespace nanogpt
