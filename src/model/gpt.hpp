// The modded-nanogpt GPT (seed 003, record of May 2025) with an explicit forward and backward
// per layer, in the style of llm.c: every activation the backward needs has a name below.
//
//   x = x0 = rmsnorm(embed(tokens))
//   for each block i (U-net: the first L/2 outputs are pushed, block i >= L/2 adds
//   skip_weights[i - L/2] · pop() first):
//     x = λ0·x + λ1·x0
//     x += c_proj(attention(rope(rmsnorm_h(q)), rope(rmsnorm_h(k)), λa0·v + λa1·ve))  (q,k,v from
//          qkv_w · rmsnorm(x); skipped in attention-free layers; with num_kv_heads = H_kv < H,
//          k and v have H_kv heads, each read by H / H_kv query heads: grouped-query attention)
//     x += c_proj(relu(c_fc(rmsnorm(x)))²)      (in moe_layers, a mixture of experts instead:
//          each token through its top-k experts' MLPs, weighted by the router; moe_ops.hpp)
//   loss = cross_entropy(30·σ(lm_head(rmsnorm(x)) / (7.5·√d)), targets)
//          (+ moe_aux_loss_coef · the load-balancing loss of each MoE block, in the backward)
//
// Three of the seed's components can be switched off (config.hpp), each taking its parameters
// with it: unet_skips (no push/pop, no skip_weights), x0_mixing (x = λ0·x + λ1·x0 becomes
// nothing, no per-block lambdas; x0 only feeds block 0) and value_embeddings (v = λa0·v in
// every layer, no value_embeds.*).
//
// Activations are kept (not recomputed); attention keeps only its output and log-sum-exp and
// recomputes scores. relu² is fused into c_fc's product and its backward into c_proj's input
// gradient (GEMM epilogues), so the MLP's hidden layer is never swept on its own, and only its
// output h is stored: relu²'(x) = 2·relu(x) = 2·√h.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "config/config.hpp"
#include "kernels/rotary.hpp"
#include "model/backward_listener.hpp"
#include "model/block_ops.hpp"
#include "model/gpt_weights.hpp"
#include "model/kv_cache.hpp"
#include "model/model_kernels.hpp"
#include "model/moe_ops.hpp"
#include "model/packed_weights.hpp"
#include "model/parameters.hpp"
#include "runtime/aligned_memory.hpp"
#include "runtime/thread_pool.hpp"
#include "runtime/workspace.hpp"

namespace nanogpt {

// One sequence of a batched cached forward (GptT::forward_cached_batch): new tokens that
// continue the sequence whose keys and values `cache` holds.
template <class Real>
struct CachedSegmentT {
  std::span<const int32_t> tokens;
  KvCacheT<Real>* cache = nullptr;
};
using CachedSegment = CachedSegmentT<float>;

// Real is float for training; double instantiates the same math with float64 reference
// kernels for finite-difference checks.
// Post-training's view of the head's loss (src/posttrain/): row t's loss becomes
// w_t·(-log softmax(y/τ)[target_t]), τ the temperature the tokens were sampled at. Weights may
// be negative (policy gradients) or 0 (tokens outside the loss mask); the calls return
// Σ_t w_t·loss_t and per_token outputs stay unweighted. The default is the plain loss, bit for
// bit.
//
// final_norm_grad is for a head of post-training's own on the trunk's features (PPO's value
// head, posttrain/value_head.hpp): the final-norm rows h_t (the lm_head's input, final_norm()
// after the forward) feed it, and its loss's gradient G = dL_extra/dh reaches the trunk by being
// added to the gradient of the final norm's output before that norm's backward. So
// forward_backward's gradients become those of loss_scale·Σ_t w_t·loss_t + L_extra: G is added as
// given, not multiplied by loss_scale (the caller scales its own loss). forward_loss ignores it.
template <class Real>
struct TokenLossT {
  std::span<const Real> weights;  // empty: every weight 1; else one per target
  float temperature = 1.0f;
  Real* entropy = nullptr;  // optional [T]: each row's entropy of softmax(y/τ), nats
  // Empty: none (the plain backward, bit for bit); else [T, model_dim] row-major, one row per
  // position.
  std::span<const Real> final_norm_grad;
};

template <class Real>
class GptT {
 public:
  explicit GptT(const Config& config);
  // The weight views point into the model's own buffers: a copy would point into the
  // original's, so the model moves (buffers and views together) but never copies.
  GptT(const GptT&) = delete;
  GptT& operator=(const GptT&) = delete;
  GptT(GptT&&) noexcept = default;
  GptT& operator=(GptT&&) noexcept = default;

  const Config& config() const { return config_; }
  Precision precision() const { return precision_; }
  ParameterSetT<Real>& params() { return params_; }
  const ParameterSetT<Real>& params() const { return params_; }
  // Typed views of params() and grads().
  const GptWeights<Real>& weights() const { return w_; }
  const GptWeights<Real>& grad_weights() const { return g_; }
  AlignedVector<Real>& grads() { return grads_; }
  const AlignedVector<Real>& grads() const { return grads_; }
  void zero_grads();

  // The seed's initialisation: linear weights (and MoE routers) uniform ±√3·0.5·fan_in^-½;
  // attn.c_proj, mlp.c_proj (the experts' too) and lm_head zero; embeddings standard normal;
  // lambdas (1, 0) and (0.5, 0.5); skip weights 1.
  void init_parameters(uint64_t seed);

  // A batch of B independent sequences of seq_len tokens each, laid end to end in inputs
  // (seq_len = 0: the whole input is one sequence): forward, loss, backward. No token attends
  // across a sequence boundary and positions restart at each sequence, so the result is the
  // sum of the B sequences run one by one, with every product B times taller. Batching more
  // than one sequence needs seq_len to be a multiple of block_size (the window mask's blocks
  // then line up with each sequence). Gradients of loss_scale·Σ_t loss_t are ADDED to
  // grads() (so batches accumulate). `window_blocks` is the long-layer window W; short layers
  // use max(1, W/2). Returns Σ_t loss_t. With MoE blocks, the gradients are those of
  // loss_scale·(Σ_t loss_t + T·moe_aux_loss_coef·moe_aux_loss()), the returned value the
  // language loss alone. The balancing loss is taken over the call's T tokens (a GShard group),
  // so unlike the language loss its gradient depends on how sequences are batched.
  // `listener` (nullable) hears, stage by stage, which gradients are final.
  // `token_loss` weights the rows' losses (TokenLossT above).
  double forward_backward(std::span<const int32_t> inputs, std::span<const int32_t> targets,
                          int64_t window_blocks, float loss_scale, int64_t seq_len = 0,
                          BackwardListener* listener = nullptr,
                          const TokenLossT<Real>& token_loss = {});
  // The backward's stages (backward_listener.hpp): num_layers + 2, and the stage after which
  // each parameter's gradient is final, indexed as params().tensors().
  int backward_stages() const { return static_cast<int>(config_.num_layers) + 2; }
  const std::vector<int>& gradient_ready_stages() const { return ready_stage_; }
  // Forward only. per_token (nullable) receives each position's loss. Returns Σ_t loss_t.
  double forward_loss(std::span<const int32_t> inputs, std::span<const int32_t> targets,
                      int64_t window_blocks, Real* per_token = nullptr, int64_t seq_len = 0,
                      const TokenLossT<Real>& token_loss = {});

  // Decoding: runs T new tokens after the cache's (positions and documents continue from
  // it; RoPE at absolute positions) through the same blocks as training, stores their keys and
  // values in the cache, and leaves their final-norm rows in final_norm() (the head's input).
  // An InputError if the cache has no room for them.
  // The one-segment case of forward_cached_batch.
  void forward_cached(std::span<const int32_t> tokens, int64_t window_blocks,
                      KvCacheT<Real>& cache);
  // Decoding several independent sequences at once: each segment's tokens continue its own
  // cache (positions, documents, the causal and window mask exactly as forward_cached), while
  // every product (qkv, projections, MLP) runs once over the rows of all segments laid end to
  // end; rotary positions and attention are per segment, against its cache. final_norm() holds
  // the segments' rows in order. Each segment's rows equal forward_cached of that segment alone
  // (the GEMM's rows do not depend on the rows beside them; tests/test_batched_forward.cpp).
  // InputError for an empty segment, a missing, foreign, full or repeated cache; nothing is
  // stored then.
  void forward_cached_batch(std::span<const CachedSegmentT<Real>> segments, int64_t window_blocks);

  // Intermediate activations of the last forward, for tests against the reference.
  const AlignedVector<Real>& x0() const { return x0_; }
  const AlignedVector<Real>& block_output(int64_t layer) const { return layers_[layer].x_out; }
  // The final-norm rows of the last forward (forward_loss, forward_backward or a cached one):
  // its first T·model_dim entries, [T, model_dim], the lm_head's input; neither the loss nor the
  // backward changes them, so a head of post-training's own (TokenLossT::final_norm_grad) reads
  // its features here.
  const AlignedVector<Real>& final_norm() const { return final_norm_; }
  // The load-balancing losses of the last forward's MoE blocks, summed (0 without any), and a
  // block's routing: each token's experts_per_token experts, most probable first.
  double moe_aux_loss() const;
  const std::vector<int32_t>& moe_expert_ids(int64_t layer) const {
    return layers_[static_cast<size_t>(layer)].expert_ids;
  }

  int64_t layer_window(int64_t layer, int64_t window_blocks) const;

  // Memory the model holds besides its weights and gradients. The workspace holds the kernels'
  // scratch (GEMM packing, attention's packed K/V, the fused loss's logits): forward_loss,
  // forward_backward and forward_cached install it (Workspace::Use) for their kernels, and it
  // is freed with the model. activation_bytes() is what the activations and the backward's
  // buffers take, sized by the largest call's T (docs/ARCHITECTURE.md, "Memory").
  Workspace& workspace() { return *workspace_; }
  const Workspace& workspace() const { return *workspace_; }
  size_t activation_bytes() const;

  // lm_head packed for the logits' product (FusedLossParams::W_packed), kept like the blocks'
  // weights in a cached forward (model/packed_weights.hpp): null for the float64 model and with
  // the FP8 head (its W is rounded first).
  const PackedB* packed_head();
  // Where the fused loss makes its per-call copies of the head (FusedLossParams::buffers): a
  // caller running the head itself (evaluation's scorer) passes these too.
  FusedLossBuffers& loss_buffers() { return loss_buffers_; }
  // Memory the packed weights take (packed on a cached forward's or packed_head()'s first use
  // after the parameters changed), and the copies of the head the fused loss fills on each call
  // (loss_buffers_).
  size_t packed_weight_bytes() const { return packed_.bytes() + loss_buffers_.bytes(); }

 private:
  struct LayerActivations {
    AlignedVector<Real> x_in;     // [T, d] block input (after the skip)
    AlignedVector<Real> norm1;    // [T, d] rmsnorm(x_mix_)
    AlignedVector<Real> rstd1;    // [T]
    AlignedVector<Real> qkv_raw;  // [T, (H + 2·H_kv)·D] qkv_w · norm1: q, k, v
    AlignedVector<Real> rstd_qk;  // [T, H + H_kv] per-head norms of q and k
    AlignedVector<Real> qkv;      // [T, (H + 2·H_kv)·D] attention inputs: rope'd q, k; mixed v
    // Or, training with bf16 products on float (qkv_stored_rounded), qkv rounded instead: all
    // that attention's packers read (half the bytes, the same packed operands); the q/k norm's
    // backward recomputes its fp32 rows from qkv_raw.
    AlignedVector<bf16> qkv_rounded;
    AlignedVector<Real> attn_out;  // [T, H·D]
    // Or, training with bf16 products on float (qkv_stored_rounded), attn_out rounded instead,
    // by the attention's forward as it finishes each tile: all that reads it, the output
    // projection's products (its forward's A in place, its weight gradient's B) and the
    // attention backward's Delta (from the rounded output, as flash attention's does).
    AlignedVector<bf16> attn_out_rounded;
    AlignedVector<Real> lse;        // [H, T]
    AlignedVector<Real> norm2;      // [T, d]
    AlignedVector<Real> rstd2;      // [T]
    AlignedVector<Real> h;          // [T, 4d] relu²(c_fc · norm2), or in h_rounded:
    AlignedVector<bf16> h_rounded;  // with bf16 products on float (read only by products)
    AlignedVector<Real> x_out;      // [T, d] block output
    // With bf16 products on float, norm1 and norm2 rounded: what their products read (the
    // forward's A in place, the weight gradient's B), [T, d] each (norm2's for dense MLPs).
    AlignedVector<bf16> norm1_rounded;
    AlignedVector<bf16> norm2_rounded;
    // A mixture-of-experts MLP instead of h (rows = T·k, in expert order):
    AlignedVector<Real> router_probs;  // [T, E]
    std::vector<int32_t> expert_ids;   // [T·k] each token's experts
    AlignedVector<Real> gates;         // [T·k] their renormalised probabilities
    MoePlan plan;                      // the permutation into expert order
    AlignedVector<Real> xe;            // [rows, d] norm2's rows in expert order
    AlignedVector<Real> he;            // [rows, hidden] relu²(c_fc_e · xe)
    AlignedVector<Real> ye;            // [rows, d] c_proj_e · he
    double aux_loss = 0;               // E·Σ_e f_e·P_e
  };

  GptWeights<Real> bind(Real* base) const;
  // W (n_out × n_in) packed for a cached forward's product; null when not cached (training
  // packs per call) and for the float64 model.
  const PackedB* packed_for(bool cached, const Real* W, int64_t n_out, int64_t n_in);
  // cached: the inputs are the segments_ of forward_cached_batch, each continuing its cache.
  void forward(std::span<const int32_t> inputs, int64_t window_blocks, int64_t seq_len,
               bool cached = false);
  // Sizes the activations for T rows; cached: a cached forward's (no backward buffers, the
  // dense blocks in inference_).
  void ensure_capacity(int64_t T, int64_t seq_len, bool cached);
  void size_block(LayerActivations& A, int64_t layer, int64_t T, bool cached);
  // Whether a forward (cached: over K/V caches) stores attention's inputs rounded to bf16 only
  // (LayerActivations::qkv_rounded): training with bf16 products on float. A cached forward
  // keeps them in full, as its caches do.
  bool qkv_stored_rounded(bool cached) const;
  // Where block `layer` of a forward keeps its activations (its output is always
  // layers_[layer].x_out).
  LayerActivations& block_activations(int64_t layer, bool cached) {
    return cached && !config_.is_moe_layer(layer) ? inference_
                                                  : layers_[static_cast<size_t>(layer)];
  }
  // Each token's position (RoPE) and document (the mask), from tokens_.
  void compute_positions(int64_t seq_len, bool cached);
  // A cached forward's attention in layer `layer` (activations A): each segment against its
  // cache.
  void cached_attention(int64_t layer, LayerActivations& A, int64_t window_blocks);
  // The attention of rows [row0, row0 + rows) of the last forward; with a cache, their keys and
  // values are the cache's rows, these rows' after the past's.
  AttentionArgs<Real> attention_args(int64_t layer, const LayerActivations& A,
                                     int64_t window_blocks, const KvCacheT<Real>* cache,
                                     int64_t row0, int64_t rows) const;

  Config config_;
  Precision precision_;  // of the products; the float64 instantiation ignores it
  ParameterSetT<Real> params_;
  std::vector<int> ready_stage_;  // per tensor: see gradient_ready_stages()
  AlignedVector<Real> grads_;
  GptWeights<Real> w_, g_;  // views of params_ and grads_
  PackedWeights packed_;    // weights packed for cached forwards and the decoders' head
  // The fused loss's copies of the head (W packed for dx; with the FP8 head, W rounded and
  // packed for the logits too), made again on each call into memory kept here.
  FusedLossBuffers loss_buffers_;
  RotaryTableT<Real> rotary_;
  int64_t T_ = 0;              // tokens in the last forward (all its sequences)
  int64_t window_blocks_ = 1;  // its long-layer window

  std::vector<int32_t> tokens_, doc_;  // doc_: each token's document, when not cached
  // The segments of a cached forward: rows [row0, row0 + rows) continue *cache.
  struct Segment {
    int64_t row0, rows;
    KvCacheT<Real>* cache;
  };
  std::vector<Segment> segments_;
  std::vector<int32_t> segment_tokens_;  // their tokens, end to end
  // One-thread pools, one per worker of the calling pool (cached_attention).
  std::vector<std::unique_ptr<ThreadPool>> single_pools_;
  std::vector<int64_t> pos_;  // each token's position in its sequence (RoPE)
  AlignedVector<Real> x0_, rstd0_;
  // A block's x_mix = λ0·x_in + λ1·x0 (x_in without x0_mixing) and x_attn, the residual stream
  // after attention, [T, d] each: read within the block that makes them (attention's and the
  // MLP's projections add them in their epilogues, norm2 normalises x_attn) and by no backward,
  // so one pair serves every layer instead of a pair per layer.
  AlignedVector<Real> x_mix_, x_attn_;
  std::vector<LayerActivations> layers_;
  // A cached forward keeps no block's activations but its output (nothing differentiates it):
  // its dense blocks run one after another in this one set, so decoding and scoring touch a
  // block's worth of memory, not the model's (measured: first-touch page faults of the
  // per-layer buffers took ~15% of a 100-case fortunes-choice run, docs/ARCHITECTURE.md
  // "Memory"). MoE blocks keep their own (their routing stays readable per layer).
  LayerActivations inference_;
  AlignedVector<Real> final_norm_, rstd_final_;
  // Backward scratch.
  AlignedVector<Real> dx_, dx0_, dh_, dqkv_, dattn_, dnorm_;
  // The gradient of c_fc's output, read only by c_fc's two products: with bf16 products on
  // float, stored rounded here instead of in dh_ (hidden_gradient()).
  AlignedVector<bf16> dh_rounded_;
  // The gradient of the qkv projection's output, read only by its two products: with bf16
  // products on float, qk_norm.rotary.v_mix's backward writes it here, rounded, and dqkv_ keeps
  // attention's gradients (qkv_gradient()).
  AlignedVector<bf16> dqkv_rounded_;
  // The gradient of attention's output, read only by the attention backward's packers and
  // Delta: with bf16 products on float, the output projection's input-gradient product writes
  // it here, rounded, instead of in dattn_ (attention_gradient()).
  AlignedVector<bf16> dattn_rounded_;
  // dx rounded, for the two products that read it next and nothing else of it (the MLP's
  // c_proj, then attention's): with bf16 products on float, the pass that finishes dx before
  // them writes it (dx_as_products_read()).
  AlignedVector<bf16> dx_rounded_;
  AlignedVector<Real> dye_, dhe_, dxe_, dgates_, dlogits_;  // MoE blocks'
  std::vector<AlignedVector<Real>> dskip_;
  // Whether activations and gradients that only products read are stored rounded to bf16
  // (ProductRows): with bf16 products on float.
  bool product_rows_rounded() const;
  ProductRows<Real> hidden(LayerActivations& A) const;  // the MLP's h
  // dx as the products after it read it: dx itself, or dx_rounded_.
  ProductRows<Real> dx_as_products_read(Real* dx);
  // The norms' rows as the products read them (rounded with bf16 products on float).
  ProductRows<Real> norm1_rows(LayerActivations& A) const;
  ProductRows<Real> norm2_rows(LayerActivations& A) const;
  // Attention's output as the output projection's products read it (attn_out_rounded where the
  // forward made it, else attn_out).
  ProductRows<Real> attention_output_rows(LayerActivations& A, bool cached) const;
  ProductRows<Real> hidden_gradient();
  ProductRows<Real> qkv_gradient();
  ProductRows<Real> attention_gradient();
  // Held by pointer so the model stays movable (a Workspace is not).
  std::unique_ptr<Workspace> workspace_ = std::make_unique<Workspace>("model");
};

using Gpt = GptT<float>;
extern template class GptT<float>;
extern template class GptT<double>;

}  // namespace nanogpt
