#include "model/gpt.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <type_traits>

#include "model/block_ops.hpp"
#include "model/model_kernels.hpp"
#include "runtime/error.hpp"
#include "runtime/random.hpp"
#include "runtime/thread_pool.hpp"

namespace nanogpt {

namespace {

std::string block_name(int64_t i, const char* suffix) {
  return "blocks." + std::to_string(i) + "." + suffix;
}

std::string value_embed_name(int k) {
  return "value_embeds." + std::to_string(k) + ".weight";
}

// Activations (floating point) only grow: a call with fewer rows than the last leaves the
// rest in place, so alternating row counts (a cached forward of contexts, then of choices)
// do not zero-fill megabytes per call. Token, position and routing arrays are sized exactly.
template <class V>
void resize(V& v, int64_t n) {
  using T = typename V::value_type;
  if constexpr (std::is_floating_point_v<T> || std::is_same_v<T, bf16>) {
    if (v.size() >= static_cast<size_t>(n)) return;
  }
  v.resize(static_cast<size_t>(n));
}

template <class V>
size_t bytes_of(const V& v) {
  return v.capacity() * sizeof(typename V::value_type);
}

}  // namespace

template <class Real>
GptT<Real>::GptT(const Config& config) : config_(config), precision_(resolved_precision(config)) {
  validate_config(config_);
  const QkvShape s = qkv_shape(config_);
  const int64_t V = config_.vocab_size, d = config_.model_dim;
  const int64_t HD = s.q_width(), KV = s.kv_width(), L = config_.num_layers;
  // Each tensor with the backward stage after which its gradient is final (a block's: L - i).
  int stage = 0;
  auto add = [&](const std::string& name, std::vector<int64_t> shape, ParamGroup group,
                 ParamInit init, int at_stage = -1) {
    params_.add(name, std::move(shape), group, init);
    ready_stage_.push_back(at_stage >= 0 ? at_stage : stage);
  };
  // A value embedding's gradient is final after the lowest layer that reads it (0: unread).
  auto value_embed_stage = [&](int k) {
    for (int64_t i = 0; i < L; ++i) {
      if (config_.has_attention(i) && config_.value_embed_index(i) == k)
        return static_cast<int>(L - i);
    }
    return 0;
  };
  add("embed.weight", {V, d}, ParamGroup::kEmbedding, ParamInit::kNormal, L + 1);
  // Value embeddings are mixed into v, so they are as wide as v: H_kv·D (d without GQA).
  if (config_.value_embeddings) {
    for (int k = 0; k < 3; ++k) {
      add(value_embed_name(k), {V, KV}, ParamGroup::kEmbedding, ParamInit::kNormal,
          value_embed_stage(k));
    }
  }
  for (int64_t i = 0; i < L; ++i) {
    stage = static_cast<int>(L - i);
    if (config_.has_attention(i)) {
      // The seed's [3, H·D, d] qkv_w; with grouped-query attention q, k and v differ in height
      // and are three tensors, added one after another so they still form one [(H + 2·H_kv)·D,
      // d] matrix for a single product (and Muon orthogonalises each on its own, as it does
      // the three slices of qkv_w).
      if (s.Hkv == s.Hq) {
        add(block_name(i, "attn.qkv_w"), {3, HD, d}, ParamGroup::kMatrix, ParamInit::kUniformFanIn);
      } else {
        add(block_name(i, "attn.q_w"), {HD, d}, ParamGroup::kMatrix, ParamInit::kUniformFanIn);
        add(block_name(i, "attn.k_w"), {KV, d}, ParamGroup::kMatrix, ParamInit::kUniformFanIn);
        add(block_name(i, "attn.v_w"), {KV, d}, ParamGroup::kMatrix, ParamInit::kUniformFanIn);
      }
      add(block_name(i, "attn.lambdas"), {2}, ParamGroup::kScalar, ParamInit::kAttnLambdas);
      add(block_name(i, "attn.c_proj.weight"), {d, HD}, ParamGroup::kMatrix, ParamInit::kZero);
    }
    if (config_.is_moe_layer(i)) {
      // Stacked per expert, as a PyTorch MoE holds them; Muon splits the stacks into E matrices.
      // The router starts like a hidden matrix: logits of standard deviation about 0.5 on the
      // normalised input, varied enough to spread tokens, far from one-hot.
      const int64_t E = config_.num_experts, hidden = config_.moe_hidden();
      add(block_name(i, "mlp.router.weight"), {E, d}, ParamGroup::kRouter,
          ParamInit::kUniformFanIn);
      add(block_name(i, "mlp.experts.c_fc.weight"), {E, hidden, d}, ParamGroup::kMatrix,
          ParamInit::kUniformFanIn);
      add(block_name(i, "mlp.experts.c_proj.weight"), {E, d, hidden}, ParamGroup::kMatrix,
          ParamInit::kZero);
    } else {
      add(block_name(i, "mlp.c_fc.weight"), {4 * d, d}, ParamGroup::kMatrix,
          ParamInit::kUniformFanIn);
      add(block_name(i, "mlp.c_proj.weight"), {d, 4 * d}, ParamGroup::kMatrix, ParamInit::kZero);
    }
    if (config_.x0_mixing) {
      add(block_name(i, "lambdas"), {2}, ParamGroup::kScalar, ParamInit::kBlockLambdas);
    }
  }
  add("lm_head.weight", {config_.vocab_padded(), d}, ParamGroup::kHead, ParamInit::kZero, 0);
  // skip_weights[i - L/2] is written by block i >= L/2: final after block L/2.
  if (config_.unet_skips) {
    add("skip_weights", {L / 2}, ParamGroup::kScalar, ParamInit::kOnes,
        static_cast<int>(L - L / 2));
  }
  params_.allocate();
  grads_.assign(params_.size(), 0.0f);
  w_ = bind(params_.values().data());
  g_ = bind(grads_.data());
  layers_.resize(static_cast<size_t>(L));
  dskip_.resize(config_.unet_skips ? static_cast<size_t>(L / 2) : 0);
}

template <class Real>
GptWeights<Real> GptT<Real>::bind(Real* base) const {
  auto at = [&](const std::string& name) { return base + params_.info(name).offset; };
  GptWeights<Real> w;
  w.embed = at("embed.weight");
  if (config_.value_embeddings) {
    for (int k = 0; k < 3; ++k) w.value_embeds[static_cast<size_t>(k)] = at(value_embed_name(k));
  }
  w.lm_head = at("lm_head.weight");
  if (config_.unet_skips) w.skip_weights = at("skip_weights");
  w.blocks.resize(static_cast<size_t>(config_.num_layers));
  for (int64_t i = 0; i < config_.num_layers; ++i) {
    BlockWeights<Real>& b = w.blocks[static_cast<size_t>(i)];
    if (config_.has_attention(i)) {
      const QkvShape s = qkv_shape(config_);
      b.qkv_w = at(block_name(i, s.Hkv == s.Hq ? "attn.qkv_w" : "attn.q_w"));
      b.attn_lambdas = at(block_name(i, "attn.lambdas"));
      b.attn_proj = at(block_name(i, "attn.c_proj.weight"));
      const int ve = config_.value_embed_index(i);
      if (ve >= 0) b.value_embed = w.value_embeds[static_cast<size_t>(ve)];
    }
    if (config_.is_moe_layer(i)) {
      b.router = at(block_name(i, "mlp.router.weight"));
      b.expert_fc = at(block_name(i, "mlp.experts.c_fc.weight"));
      b.expert_proj = at(block_name(i, "mlp.experts.c_proj.weight"));
    } else {
      b.c_fc = at(block_name(i, "mlp.c_fc.weight"));
      b.mlp_proj = at(block_name(i, "mlp.c_proj.weight"));
    }
    if (config_.x0_mixing) b.lambdas = at(block_name(i, "lambdas"));
  }
  return w;
}

template <class Real>
void GptT<Real>::zero_grads() {
  std::fill(grads_.begin(), grads_.end(), Real(0));
}

template <class Real>
void GptT<Real>::init_parameters(uint64_t seed) {
  // One generator drawn in parameter order: the tensors' order fixes the values.
  Rng rng(seed);
  for (const ParamTensor& t : params_.tensors()) {
    Real* p = params_.values().data() + t.offset;
    switch (t.init) {
      case ParamInit::kZero:
        std::fill(p, p + t.numel, Real(0));
        break;
      case ParamInit::kNormal:
        for (size_t i = 0; i < t.numel; ++i)
          p[i] = static_cast<Real>(static_cast<float>(rng.normal()));
        break;
      case ParamInit::kUniformFanIn: {
        const double fan_in = static_cast<double>(t.shape.back());
        const double bound = std::sqrt(3.0) * 0.5 / std::sqrt(fan_in);
        for (size_t i = 0; i < t.numel; ++i)
          p[i] = static_cast<Real>(static_cast<float>(rng.uniform(-bound, bound)));
        break;
      }
      case ParamInit::kAttnLambdas:
        p[0] = Real(0.5);
        p[1] = Real(0.5);
        break;
      case ParamInit::kBlockLambdas:
        p[0] = Real(1);
        p[1] = Real(0);
        break;
      case ParamInit::kOnes:
        std::fill(p, p + t.numel, Real(1));
        break;
    }
  }
}

template <class Real>
int64_t GptT<Real>::layer_window(int64_t layer, int64_t window_blocks) const {
  return config_.layer_window_blocks(layer, window_blocks);
}

template <class Real>
void GptT<Real>::size_block(LayerActivations& A, int64_t layer, int64_t T, bool cached) {
  const QkvShape s = qkv_shape(config_);
  const int64_t d = config_.model_dim;
  resize(A.x_in, T * d);
  resize(A.norm2, T * d);
  resize(A.rstd2, T);
  if (config_.is_moe_layer(layer)) {
    const int64_t rows = T * config_.experts_per_token;
    resize(A.router_probs, T * config_.num_experts);
    resize(A.expert_ids, rows);
    resize(A.gates, rows);
    resize(A.xe, rows * d);
    resize(A.he, rows * config_.moe_hidden());
    resize(A.ye, rows * d);
  } else if (product_rows_rounded()) {
    resize(A.h_rounded, T * 4 * d);
    resize(A.norm2_rounded, T * d);
  } else {
    resize(A.h, T * 4 * d);
  }
  if (config_.has_attention(layer)) {
    resize(A.norm1, T * d);
    if (product_rows_rounded()) resize(A.norm1_rounded, T * d);
    resize(A.rstd1, T);
    resize(A.qkv_raw, T * s.row());
    resize(A.rstd_qk, T * (s.Hq + s.Hkv));
    if (qkv_stored_rounded(cached)) {
      resize(A.qkv_rounded, T * s.row());
    } else {
      resize(A.qkv, T * s.row());
    }
    if (qkv_stored_rounded(cached)) {
      resize(A.attn_out_rounded, T * s.q_width());
    } else {
      resize(A.attn_out, T * s.q_width());
    }
    resize(A.lse, s.Hq * T);
  }
}

template <class Real>
void GptT<Real>::ensure_capacity(int64_t T, int64_t seq_len, bool cached) {
  const QkvShape s = qkv_shape(config_);
  const int64_t d = config_.model_dim, HD = s.q_width();
  if (rotary_.max_positions() < seq_len) rotary_ = RotaryTableT<Real>(seq_len, config_.head_dim);
  resize(tokens_, T);
  resize(doc_, T);
  resize(pos_, T);
  resize(x0_, T * d);
  resize(rstd0_, T);
  resize(x_mix_, T * d);
  resize(x_attn_, T * d);
  for (int64_t i = 0; i < config_.num_layers; ++i) {
    LayerActivations& A = layers_[static_cast<size_t>(i)];
    resize(A.x_out, T * d);
    if (!cached || config_.is_moe_layer(i)) {
      size_block(A, i, T, cached);
    } else {
      size_block(inference_, i, T, cached);
    }
  }
  resize(final_norm_, T * d);
  resize(rstd_final_, T);
  if (cached) return;  // no backward follows a cached forward
  resize(dx_, T * d);
  resize(dx0_, T * d);
  if (product_rows_rounded()) {
    resize(dh_rounded_, T * 4 * d);
  } else {
    resize(dh_, T * 4 * d);
  }
  resize(dqkv_, T * s.row());
  if (product_rows_rounded()) resize(dqkv_rounded_, T * s.row());
  if (product_rows_rounded()) resize(dx_rounded_, T * d);
  if (product_rows_rounded()) {
    resize(dattn_rounded_, T * HD);
  } else {
    resize(dattn_, T * HD);
  }
  resize(dnorm_, T * d);
  if (!config_.moe_layers.empty()) {
    const int64_t rows = T * config_.experts_per_token;
    resize(dye_, rows * d);
    resize(dhe_, rows * config_.moe_hidden());
    resize(dxe_, rows * d);
    resize(dgates_, rows);
    resize(dlogits_, T * config_.num_experts);
  }
  for (auto& skip : dskip_) resize(skip, T * d);
}

template <class Real>
size_t GptT<Real>::activation_bytes() const {
  size_t total = bytes_of(tokens_) + bytes_of(doc_) + bytes_of(pos_) + bytes_of(x0_) +
                 bytes_of(rstd0_) + bytes_of(x_mix_) + bytes_of(x_attn_) + bytes_of(final_norm_) +
                 bytes_of(rstd_final_);
  std::vector<const LayerActivations*> sets;
  for (const LayerActivations& A : layers_) sets.push_back(&A);
  sets.push_back(&inference_);
  for (const LayerActivations* set : sets) {
    const LayerActivations& A = *set;
    for (const AlignedVector<Real>* v :
         {&A.x_in, &A.norm1, &A.rstd1, &A.qkv_raw, &A.rstd_qk, &A.qkv, &A.attn_out, &A.lse,
          &A.norm2, &A.rstd2, &A.h, &A.x_out, &A.router_probs, &A.gates, &A.xe, &A.he, &A.ye}) {
      total += bytes_of(*v);
    }
    total += bytes_of(A.h_rounded) + bytes_of(A.norm1_rounded) + bytes_of(A.norm2_rounded) +
             bytes_of(A.qkv_rounded) + bytes_of(A.attn_out_rounded) + bytes_of(A.expert_ids) +
             bytes_of(A.plan.offsets) + bytes_of(A.plan.entry_of_row) +
             bytes_of(A.plan.row_of_entry);
  }
  for (const AlignedVector<Real>* v :
       {&dx_, &dx0_, &dh_, &dqkv_, &dattn_, &dnorm_, &dye_, &dhe_, &dxe_, &dgates_, &dlogits_}) {
    total += bytes_of(*v);
  }
  for (const AlignedVector<Real>& v : dskip_) total += bytes_of(v);
  return total + bytes_of(dh_rounded_) + bytes_of(dqkv_rounded_) + bytes_of(dx_rounded_) +
         bytes_of(dattn_rounded_);
}

template <class Real>
bool GptT<Real>::product_rows_rounded() const {
  return std::is_same_v<Real, float> && precision_ == Precision::kBf16;
}

template <class Real>
bool GptT<Real>::qkv_stored_rounded(bool cached) const {
  return !cached && product_rows_rounded();
}

namespace {

// The form of a ProductRows the model stores: `rounded` where it keeps such rows in bf16, else
// `values`.
template <class Real>
ProductRows<Real> rows_as_stored(bool in_bf16, AlignedVector<Real>& values,
                                 AlignedVector<bf16>& rounded) {
  ProductRows<Real> rows;
  if (in_bf16) {
    rows.rounded = rounded.data();
  } else {
    rows.values = values.data();
  }
  return rows;
}

}  // namespace

template <class Real>
ProductRows<Real> GptT<Real>::hidden(LayerActivations& A) const {
  return rows_as_stored(product_rows_rounded(), A.h, A.h_rounded);
}

template <class Real>
ProductRows<Real> GptT<Real>::norm1_rows(LayerActivations& A) const {
  return rows_as_stored(product_rows_rounded(), A.norm1, A.norm1_rounded);
}

template <class Real>
ProductRows<Real> GptT<Real>::attention_output_rows(LayerActivations& A, bool cached) const {
  return rows_as_stored(qkv_stored_rounded(cached), A.attn_out, A.attn_out_rounded);
}

template <class Real>
ProductRows<Real> GptT<Real>::norm2_rows(LayerActivations& A) const {
  return rows_as_stored(product_rows_rounded(), A.norm2, A.norm2_rounded);
}

template <class Real>
ProductRows<Real> GptT<Real>::hidden_gradient() {
  return rows_as_stored(product_rows_rounded(), dh_, dh_rounded_);
}

template <class Real>
ProductRows<Real> GptT<Real>::attention_gradient() {
  return rows_as_stored(product_rows_rounded(), dattn_, dattn_rounded_);
}

template <class Real>
ProductRows<Real> GptT<Real>::qkv_gradient() {
  return rows_as_stored(product_rows_rounded(), dqkv_, dqkv_rounded_);
}

template <class Real>
ProductRows<Real> GptT<Real>::dx_as_products_read(Real* dx) {
  if (product_rows_rounded()) return {nullptr, dx_rounded_.data()};
  return {dx, nullptr};
}

template <class Real>
AttentionArgs<Real> GptT<Real>::attention_args(int64_t layer, const LayerActivations& A,
                                               int64_t window_blocks, const KvCacheT<Real>* cache,
                                               int64_t row0, int64_t rows) const {
  // q, k, v are the three parts of each token's row of the layer's qkv activation; with a
  // cache, k and v are the cache's rows, these rows' after the past's.
  const QkvShape s = qkv_shape(config_);
  AttentionArgs<Real> a;
  a.T = rows;
  a.H = s.Hq;
  a.H_kv = s.Hkv;
  a.D = s.D;
  // Without a cache this is training's forward or backward (a cached forward gives every
  // segment one): q, k, v stored rounded (qkv_stored_rounded) or in full.
  const bool rounded = cache == nullptr && qkv_stored_rounded(false);
  if (rounded) {
    a.q_bf16 = A.qkv_rounded.data() + row0 * s.row();
  } else {
    a.q = A.qkv.data() + row0 * s.row();
  }
  a.ld_q = s.row();
  if (cache != nullptr) {
    a.T_kv = cache->length() + rows;
    a.k = cache->k(layer);
    a.v = cache->v(layer);
    a.ld_kv = cache->width();
    a.doc = cache->doc();
  } else {
    a.T_kv = rows;
    if (rounded) {
      a.k_bf16 = a.q_bf16 + s.q_width();
      a.v_bf16 = a.k_bf16 + s.kv_width();
    } else {
      a.k = a.q + s.q_width();
      a.v = a.k + s.kv_width();
    }
    a.ld_kv = s.row();
    a.doc = doc_.data() + row0;
  }
  a.window_blocks = layer_window(layer, window_blocks);
  a.block_size = config_.block_size;
  a.scale = static_cast<float>(config_.attn_scale);
  a.precision = precision_;
  return a;
}

template <class Real>
void GptT<Real>::compute_positions(int64_t seq_len, bool cached) {
  // An EOT token belongs to the document it starts; so does a sequence's first token, which
  // keeps the sequences of a batch from seeing each other. After a cache, positions and
  // documents continue from its last.
  if (!cached) {
    int32_t doc = 0;
    for (int64_t t = 0; t < T_; ++t) {
      const int64_t position = t % seq_len;
      if (tokens_[t] == config_.eot_id || position == 0) ++doc;
      doc_[t] = doc;
      pos_[t] = position;
    }
    return;
  }
  for (const Segment& g : segments_) {
    const int64_t past = g.cache->length();
    int32_t* doc_of = g.cache->doc() + past;
    int32_t doc = past > 0 ? g.cache->doc()[past - 1] : 0;
    for (int64_t t = 0; t < g.rows; ++t) {
      const int64_t position = past + t;
      if (tokens_[g.row0 + t] == config_.eot_id || position == 0) ++doc;
      doc_of[t] = doc;
      pos_[g.row0 + t] = position;
    }
  }
}

template <class Real>
void GptT<Real>::cached_attention(int64_t layer, LayerActivations& A, int64_t window_blocks) {
  const QkvShape s = qkv_shape(config_);
  // Per segment: its keys and values join its cache (copied where the segment's task runs,
  // so the copies and their first touch of the cache's pages are spread over the pool too),
  // then its queries read that cache. lse is [H, rows] per segment here (inference never
  // reads it).
  auto attend = [&](const Segment& g) {
    const Real* row = A.qkv.data() + g.row0 * s.row();
    g.cache->store(layer, g.rows, row + s.q_width(), row + s.q_width() + s.kv_width(), s.row());
    model_attention_forward(attention_args(layer, A, window_blocks, g.cache, g.row0, g.rows),
                            A.attn_out.data() + g.row0 * s.q_width(), A.lse.data() + g.row0 * s.Hq);
  };
  ThreadPool& pool = ThreadPool::current();
  if (segments_.size() == 1 || pool.size() == 1) {
    for (const Segment& g : segments_) attend(g);
    return;
  }
  // Many small segments (decoding: one query each): one segment per task, each attention on
  // its worker alone — a call this small costs more in waking the pool than in arithmetic.
  // The kernels' results do not depend on their thread count (attention.hpp), so neither do
  // these. Workers get the model's workspace and a one-thread pool for the call.
  while (single_pools_.size() < static_cast<size_t>(pool.size()))
    single_pools_.push_back(std::make_unique<ThreadPool>(1));
  pool.parallel_for(segments_.size(), [&](size_t k, int worker) {
    const ThreadPool::Use one(*single_pools_[static_cast<size_t>(worker)]);
    const Workspace::Use scratch(*workspace_);
    attend(segments_[k]);
  });
}

template <class Real>
void GptT<Real>::forward_cached(std::span<const int32_t> tokens, int64_t window_blocks,
                                KvCacheT<Real>& cache) {
  const CachedSegmentT<Real> one{tokens, &cache};
  forward_cached_batch(std::span<const CachedSegmentT<Real>>(&one, 1), window_blocks);
}

template <class Real>
void GptT<Real>::forward_cached_batch(std::span<const CachedSegmentT<Real>> segments,
                                      int64_t window_blocks) {
  if (segments.empty()) throw InputError("a batched cached forward needs at least one segment");
  const int64_t width = qkv_shape(config_).kv_width();
  segments_.clear();
  segment_tokens_.clear();
  int64_t longest = 0;
  for (size_t i = 0; i < segments.size(); ++i) {
    const CachedSegmentT<Real>& g = segments[i];
    const int64_t T = static_cast<int64_t>(g.tokens.size());
    const std::string which =
        segments.size() == 1 ? std::string() : "segment " + std::to_string(i) + ": ";
    if (g.cache == nullptr) throw InputError(which + "no K/V cache to continue");
    KvCacheT<Real>& cache = *g.cache;
    if (T == 0) throw InputError(which + "cannot run the model on an empty sequence");
    if (cache.width() != width) {
      throw InputError(which + "a K/V cache of " + std::to_string(cache.width()) +
                       "-wide rows for a model whose keys are " + std::to_string(width) +
                       " wide (built for another model)");
    }
    if (cache.length() + T > cache.capacity()) {
      throw InputError(which + "the K/V cache is full: " + std::to_string(cache.length()) + " of " +
                       std::to_string(cache.capacity()) + " positions used, " + std::to_string(T) +
                       " more asked; ask for fewer tokens or a longer context");
    }
    for (const Segment& earlier : segments_) {
      if (earlier.cache == g.cache) {
        throw InputError(which +
                         "its K/V cache is also another segment's; each segment "
                         "continues a cache of its own");
      }
    }
    segments_.push_back({static_cast<int64_t>(segment_tokens_.size()), T, g.cache});
    segment_tokens_.insert(segment_tokens_.end(), g.tokens.begin(), g.tokens.end());
    longest = std::max(longest, cache.capacity());
  }
  const Workspace::Use scratch(*workspace_);
  forward(segment_tokens_, window_blocks, longest, true);
  for (const Segment& g : segments_) g.cache->advance(g.rows);
}

template <class Real>
const PackedB* GptT<Real>::packed_for(bool cached, const Real* W, int64_t n_out, int64_t n_in) {
  if constexpr (std::is_same_v<Real, float>) {
    if (cached) return &packed_.forward(W, n_out, n_in, precision_, params_.version());
  }
  return nullptr;
}

template <class Real>
const PackedB* GptT<Real>::packed_head() {
  if constexpr (std::is_same_v<Real, float>) {
    if (!config_.fp8_head) {
      return &packed_.forward(w_.lm_head, config_.vocab_padded(), config_.model_dim, precision_,
                              params_.version());
    }
  }
  return nullptr;
}

template <class Real>
void GptT<Real>::forward(std::span<const int32_t> inputs, int64_t window_blocks, int64_t seq_len,
                         bool cached) {
  const int64_t T = static_cast<int64_t>(inputs.size());
  const int64_t d = config_.model_dim, HD = config_.num_heads * config_.head_dim;
  const int64_t L = config_.num_layers, n = L / 2, V = config_.vocab_size;
  if (T == 0) throw InputError("cannot run the model on an empty sequence");
  if (seq_len == 0) seq_len = T;
  if (!cached && (seq_len < 0 || T % seq_len != 0)) {
    throw InputError("a batch of " + std::to_string(T) + " tokens is not a whole number of " +
                     std::to_string(seq_len) + "-token sequences");
  }
  if (!cached && seq_len != T && seq_len % config_.block_size != 0) {
    throw InputError("batched sequences of " + std::to_string(seq_len) +
                     " tokens: the length must be a multiple of block_size (" +
                     std::to_string(config_.block_size) +
                     ") so the window mask restarts with "
                     "each sequence; run them one at a time instead");
  }
  // Cached: seq_len is the longest cache's capacity (the rotary table's reach).
  ensure_capacity(T, seq_len, cached);
  T_ = T;
  window_blocks_ = window_blocks;
  for (int64_t t = 0; t < T; ++t) {
    if (inputs[t] < 0 || inputs[t] >= V) {
      throw InputError("token id " + std::to_string(inputs[t]) + " at position " +
                       std::to_string(t) + " is outside the vocabulary (" + std::to_string(V) +
                       ")");
    }
    tokens_[t] = inputs[t];
  }
  compute_positions(seq_len, cached);

  const QkvShape qkv = qkv_shape(config_);
  embed_norm_forward(T, d, tokens_.data(), w_.embed, x0_.data(), rstd0_.data());
  const Real* x = x0_.data();
  for (int64_t i = 0; i < L; ++i) {
    LayerActivations& A = block_activations(i, cached);
    Real* x_out = layers_[static_cast<size_t>(i)].x_out.data();
    const BlockWeights<Real>& w = w_.blocks[static_cast<size_t>(i)];
    const bool attention = config_.has_attention(i);
    // U-net: a block of the second half adds its mirror's output from the first half.
    const bool skipped = config_.unet_skips && i >= n;
    const Real* skip_src = skipped ? layers_[static_cast<size_t>(L - 1 - i)].x_out.data() : nullptr;
    const Real skip = skipped ? w_.skip_weights[i - n] : Real(0);
    const bool mix = config_.x0_mixing;
    // x_attn = x_mix + attention's projection, which adds x_mix in its epilogue; without
    // attention, x_attn is a copy of x_mix.
    residual_mix_forward(T, d, x, skip_src, skip, mix ? x0_.data() : nullptr,
                         mix ? w.lambdas[0] : Real(1), mix ? w.lambdas[1] : Real(0), A.x_in.data(),
                         x_mix_.data(), attention ? nullptr : x_attn_.data(),
                         attention ? A.norm1.data() : nullptr, A.rstd1.data(),
                         attention ? norm1_rows(A).rounded : nullptr);
    if (attention) {
      linear_forward(precision_, "attn.qkv.fwd", T, d, qkv.row(), norm1_rows(A), w.qkv_w, Real(0),
                     A.qkv_raw.data(), {}, packed_for(cached, w.qkv_w, qkv.row(), d));
      qk_norm_rotary_v_mix_forward(T, qkv, rotary_, pos_.data(), tokens_.data(), w.value_embed,
                                   w.attn_lambdas[0], w.attn_lambdas[1], A.qkv_raw.data(),
                                   A.rstd_qk.data(),
                                   qkv_stored_rounded(cached) ? nullptr : A.qkv.data(),
                                   qkv_stored_rounded(cached) ? A.qkv_rounded.data() : nullptr);
      if (cached) {
        cached_attention(i, A, window_blocks);
      } else {
        const ProductRows<Real> out = attention_output_rows(A, cached);
        model_attention_forward(attention_args(i, A, window_blocks, nullptr, 0, T), out.values,
                                A.lse.data(), out.rounded);
      }
      ProductEpilogue<Real> onto_x_mix;
      onto_x_mix.residual = x_mix_.data();
      linear_forward(precision_, "attn.c_proj.fwd", T, HD, d, attention_output_rows(A, cached),
                     w.attn_proj, Real(0), x_attn_.data(), onto_x_mix,
                     packed_for(cached, w.attn_proj, d, HD));
    }
    // x_out = x_attn + the MLP's projection, which adds x_attn in its epilogue; the experts'
    // combine adds to x_out in place, so a MoE block copies x_attn into it first.
    const bool moe = config_.is_moe_layer(i);
    rmsnorm_rows_forward("norm2", T, d, x_attn_.data(), A.norm2.data(), A.rstd2.data(),
                         moe ? x_out : nullptr, moe ? nullptr : norm2_rows(A).rounded);
    ProductEpilogue<Real> relu2;
    relu2.relu_squared = true;
    if (moe) {
      // Router in fp32 whatever the run's precision (its top-k decides the routing), then each
      // token's rows through its experts, stacked in expert order, and back.
      const int64_t E = config_.num_experts, k = config_.experts_per_token;
      const int64_t hidden = config_.moe_hidden();
      linear_forward(Precision::kFp32, "moe.router.fwd", T, d, E, A.norm2.data(), w.router, Real(0),
                     A.router_probs.data());
      moe_route_forward(T, E, k, A.router_probs.data(), A.expert_ids.data(), A.gates.data());
      A.plan = plan_moe_routing(T, E, k, A.expert_ids.data());
      A.aux_loss = load_balancing_loss(A.plan, A.router_probs.data());
      model_moe_gather(A.plan, d, A.norm2.data(), A.xe.data());
      expert_linear_forward(precision_, "moe.c_fc.fwd.relu2", A.plan, d, hidden, A.xe.data(),
                            w.expert_fc, A.he.data(), relu2);
      expert_linear_forward(precision_, "moe.c_proj.fwd", A.plan, hidden, d, A.he.data(),
                            w.expert_proj, A.ye.data());
      model_moe_combine(A.plan, d, A.ye.data(), A.gates.data(), x_out);
    } else {
      const ProductRows<Real> h = hidden(A);
      linear_forward(precision_, "mlp.c_fc.fwd.relu2", T, d, 4 * d, norm2_rows(A), w.c_fc, h, relu2,
                     packed_for(cached, w.c_fc, 4 * d, d));
      ProductEpilogue<Real> onto_x_attn;
      onto_x_attn.residual = x_attn_.data();
      linear_forward(precision_, "mlp.c_proj.fwd", T, 4 * d, d, h, w.mlp_proj, Real(0), x_out,
                     onto_x_attn, packed_for(cached, w.mlp_proj, d, 4 * d));
    }
    x = x_out;
  }
  rmsnorm_rows_forward("final_norm", T, d, x, final_norm_.data(), rstd_final_.data());
}

namespace {

template <class Real>
LossArgs<Real> loss_params(const Config& c, Precision precision, const Real* x, const Real* W,
                           const int32_t* targets, int64_t T) {
  LossArgs<Real> p;
  p.precision = precision;
  p.T = T;
  p.d = c.model_dim;
  p.V = c.vocab_padded();
  p.x = x;
  p.W = W;
  p.targets = targets;
  p.softcap = static_cast<float>(c.logit_softcap);
  p.softcap_divisor = static_cast<float>(7.5 * std::sqrt(static_cast<double>(c.model_dim)));
  p.fp8 = c.fp8_head;
  return p;
}

template <class Real>
void apply_token_loss(const TokenLossT<Real>& token_loss, int64_t T, LossArgs<Real>& p) {
  if (!token_loss.weights.empty() && static_cast<int64_t>(token_loss.weights.size()) != T) {
    throw InputError("token loss weights (" + std::to_string(token_loss.weights.size()) +
                     ") and targets (" + std::to_string(T) + ") differ in length");
  }
  if (!(token_loss.temperature > 0.0f) || !std::isfinite(token_loss.temperature)) {
    throw InputError("the loss's temperature must be finite and > 0, not " +
                     std::to_string(token_loss.temperature));
  }
  p.row_weights = token_loss.weights.empty() ? nullptr : token_loss.weights.data();
  p.temperature = token_loss.temperature;
  p.entropy = token_loss.entropy;
}

// Checked before the forward, so a wrong size changes nothing.
template <class Real>
void check_final_norm_grad(const TokenLossT<Real>& token_loss, int64_t T, int64_t d) {
  const auto n = static_cast<int64_t>(token_loss.final_norm_grad.size());
  if (n != 0 && n != T * d) {
    throw InputError("the final-norm gradient has " + std::to_string(n) +
                     " entries; it must have one row of model_dim = " + std::to_string(d) +
                     " per input (" + std::to_string(T) + " rows, " + std::to_string(T * d) +
                     " entries), or none");
  }
}

void check_targets(std::span<const int32_t> targets, int64_t T, int64_t V) {
  if (static_cast<int64_t>(targets.size()) != T) {
    throw InputError("targets (" + std::to_string(targets.size()) + ") and inputs (" +
                     std::to_string(T) + ") differ in length");
  }
  for (int64_t t = 0; t < T; ++t) {
    if (targets[t] < 0 || targets[t] >= V) {
      throw InputError("target id " + std::to_string(targets[t]) + " at position " +
                       std::to_string(t) + " is outside the vocabulary (" + std::to_string(V) +
                       ")");
    }
  }
}

}  // namespace

template <class Real>
double GptT<Real>::forward_loss(std::span<const int32_t> inputs, std::span<const int32_t> targets,
                                int64_t window_blocks, Real* per_token, int64_t seq_len,
                                const TokenLossT<Real>& token_loss) {
  check_targets(targets, static_cast<int64_t>(inputs.size()), config_.vocab_size);
  const Workspace::Use scratch(*workspace_);
  forward(inputs, window_blocks, seq_len);
  LossArgs<Real> p =
      loss_params(config_, precision_, final_norm_.data(), w_.lm_head, targets.data(), T_);
  p.W_packed = packed_head();
  p.buffers = &loss_buffers();
  apply_token_loss(token_loss, T_, p);
  return model_loss_forward(p, per_token);
}

template <class Real>
double GptT<Real>::forward_backward(std::span<const int32_t> inputs,
                                    std::span<const int32_t> targets, int64_t window_blocks,
                                    float loss_scale, int64_t seq_len, BackwardListener* listener,
                                    const TokenLossT<Real>& token_loss) {
  check_targets(targets, static_cast<int64_t>(inputs.size()), config_.vocab_size);
  check_final_norm_grad(token_loss, static_cast<int64_t>(inputs.size()), config_.model_dim);
  const Workspace::Use scratch(*workspace_);
  forward(inputs, window_blocks, seq_len);
  auto stage_done = [&](int64_t stage) {
    if (listener != nullptr) listener->gradients_final(static_cast<int>(stage));
  };
  const int64_t T = T_;
  const int64_t d = config_.model_dim, HD = config_.num_heads * config_.head_dim;
  const int64_t L = config_.num_layers, n = L / 2;
  const QkvShape qkv = qkv_shape(config_);

  // Head: fused lm_head + soft-cap + cross-entropy, then the final norm.
  LossArgs<Real> p =
      loss_params(config_, precision_, final_norm_.data(), w_.lm_head, targets.data(), T);
  p.loss_scale = loss_scale;
  p.W_packed = packed_head();
  p.buffers = &loss_buffers();
  apply_token_loss(token_loss, T, p);
  const double loss_sum = model_loss_backward(p, dnorm_.data(), g_.lm_head);
  if (!token_loss.final_norm_grad.empty()) {
    add_rows("final_norm_grad", T, d, token_loss.final_norm_grad.data(), dnorm_.data());
  }
  stage_done(0);
  Real* dx = dx_.data();
  // The products that read dx next (a dense MLP's c_proj, then attention's) read it as
  // dx_as_products_read gives it: rounded, with bf16 products, by the pass that finishes dx
  // before them. For block `layer`'s MLP that is the skip's add where the block has one
  // (by_skip), else the pass before (the final norm's backward, the next block's mix).
  const auto rounded_for_mlp = [&](int64_t layer, bool by_skip) -> bf16* {
    const bool skip_add = config_.unet_skips && layer < n;
    if (layer < 0 || skip_add != by_skip || config_.is_moe_layer(layer)) return nullptr;
    return dx_as_products_read(dx).rounded;
  };
  rmsnorm_rows_backward("final_norm.bwd", T, d, final_norm_.data(), rstd_final_.data(),
                        dnorm_.data(), dx, false, rounded_for_mlp(L - 1, false));
  std::fill(dx0_.begin(), dx0_.end(), Real(0));
  for (auto& s : dskip_) std::fill(s.begin(), s.end(), Real(0));

  for (int64_t i = L - 1; i >= 0; --i) {
    LayerActivations& stored = layers_[static_cast<size_t>(i)];  // for the ProductRows views
    const LayerActivations& A = stored;
    const BlockWeights<Real>& w = w_.blocks[static_cast<size_t>(i)];
    const BlockWeights<Real>& g = g_.blocks[static_cast<size_t>(i)];
    // dx is the gradient of this block's output; the first half's outputs also fed a skip.
    if (config_.unet_skips && i < n)
      add_rows("skip.bwd", T, d, dskip_[static_cast<size_t>(i)].data(), dx,
               rounded_for_mlp(i, true));

    // MLP: x_out = x_attn + relu²(norm2·c_fcᵀ)·mlp_projᵀ. dh is the gradient of c_fc's
    // output: that of h times relu²'s derivative (from h), in the product's epilogue; only
    // c_fc's products read it, so with bf16 products it is stored rounded (hidden_gradient).
    if (config_.is_moe_layer(i)) {
      // The same per expert on its rows (dhe_), then back through the gates and the router.
      const int64_t E = config_.num_experts, hidden = config_.moe_hidden();
      model_moe_combine_backward(A.plan, d, dx, A.ye.data(), A.gates.data(), dye_.data(),
                                 dgates_.data());
      expert_linear_backward_weight(precision_, "moe.c_proj.dW", A.plan, hidden, d, dye_.data(),
                                    A.he.data(), g.expert_proj);
      ProductEpilogue<Real> relu2_grad;
      relu2_grad.relu_squared_output = A.he.data();
      relu2_grad.ld = hidden;
      expert_linear_backward_input(precision_, "moe.c_proj.dX.relu2_bwd", A.plan, hidden, d,
                                   dye_.data(), w.expert_proj, dhe_.data(), relu2_grad);
      expert_linear_backward_weight(precision_, "moe.c_fc.dW", A.plan, d, hidden, dhe_.data(),
                                    A.xe.data(), g.expert_fc);
      expert_linear_backward_input(precision_, "moe.c_fc.dX", A.plan, d, hidden, dhe_.data(),
                                   w.expert_fc, dxe_.data());
      const double aux_weight =
          static_cast<double>(loss_scale) * static_cast<double>(T) * config_.moe_aux_loss_coef;
      moe_route_backward(A.plan, A.router_probs.data(), A.expert_ids.data(), A.gates.data(),
                         dgates_.data(), aux_weight, dlogits_.data());
      linear_backward_weight(Precision::kFp32, "moe.router.dW", T, d, E, dlogits_.data(),
                             A.norm2.data(), g.router);
      linear_backward_input(Precision::kFp32, "moe.router.dX", T, d, E, dlogits_.data(), w.router,
                            dnorm_.data());
      model_moe_gather_backward(A.plan, d, dxe_.data(), dnorm_.data());
    } else {
      const ProductRows<Real> h = hidden(stored);
      // The weight gradient reads dx in fp32: packed transposed from the rounded rows it ran
      // slower on Zen 5 (323.7 against 296.7 ms per 4 steps of the cpu preset, 6 pairs).
      linear_backward_weight(precision_, "mlp.c_proj.dW", T, 4 * d, d, dx, h, g.mlp_proj);
      ProductEpilogue<Real> relu2_grad;
      relu2_grad.relu_squared_output = h.values;
      relu2_grad.relu_squared_output_rounded = h.rounded;
      relu2_grad.ld = 4 * d;
      const ProductRows<Real> dh = hidden_gradient();
      linear_backward_input(precision_, "mlp.c_proj.dX.relu2_bwd", T, 4 * d, d,
                            dx_as_products_read(dx), w.mlp_proj, dh, relu2_grad);
      linear_backward_weight(precision_, "mlp.c_fc.dW", T, d, 4 * d, dh, norm2_rows(stored),
                             g.c_fc);
      linear_backward_input(precision_, "mlp.c_fc.dX", T, d, 4 * d, dh, w.c_fc, dnorm_.data());
    }
    // norm2's backward makes dx d(x_attn), and rounds it for attention's projection.
    const bool attention = config_.has_attention(i);
    const ProductRows<Real> dx_attn = dx_as_products_read(dx);
    rmsnorm_rows_backward("norm2.bwd", T, d, A.norm2.data(), A.rstd2.data(), dnorm_.data(), dx,
                          true, attention ? dx_attn.rounded : nullptr);

    if (attention) {
      // Attention's output as stored: fp32, or rounded only (with bf16 products), which both its
      // projection's weight gradient and the attention backward's Delta then read.
      const ProductRows<Real> out = attention_output_rows(stored, false);
      linear_backward_weight(precision_, "attn.c_proj.dW", T, HD, d, dx_attn, out, g.attn_proj);
      // The gradient of attention's output, read only by its backward (attention_gradient).
      const ProductRows<Real> dattn = attention_gradient();
      linear_backward_input(precision_, "attn.c_proj.dX", T, HD, d, dx_attn, w.attn_proj, dattn,
                            {});
      Real* dq = dqkv_.data();
      model_attention_backward(attention_args(i, A, window_blocks_, nullptr, 0, T), out.values,
                               A.lse.data(), dattn.values, dq, dq + qkv.q_width(),
                               dq + qkv.q_width() + qkv.kv_width(), dattn.rounded, out.rounded);
      // The gradient of qkv_raw, read only by the projection's products (qkv_gradient).
      const ProductRows<Real> draw = qkv_gradient();
      const std::array<double, 2> dla = qk_norm_rotary_v_mix_backward(
          T, qkv, rotary_, pos_.data(), tokens_.data(), w.value_embed, g.value_embed,
          w.attn_lambdas[0], w.attn_lambdas[1], A.qkv_raw.data(), A.rstd_qk.data(), dqkv_.data(),
          draw.rounded);
      g.attn_lambdas[0] += static_cast<Real>(dla[0]);
      g.attn_lambdas[1] += static_cast<Real>(dla[1]);
      linear_backward_weight(precision_, "attn.qkv.dW", T, d, qkv.row(), draw, norm1_rows(stored),
                             g.qkv_w);
      linear_backward_input(precision_, "attn.qkv.dX", T, d, qkv.row(), draw, w.qkv_w,
                            dnorm_.data());
      rmsnorm_rows_backward("norm1.bwd", T, d, A.norm1.data(), A.rstd1.data(), dnorm_.data(), dx,
                            true);
    }
    // dx is now d(x_mix); back through the mix (and, for the second half, the skip).
    const bool skipped = config_.unet_skips && i >= n;
    const Real* skip_src = skipped ? layers_[static_cast<size_t>(L - 1 - i)].x_out.data() : nullptr;
    const Real skip = skipped ? w_.skip_weights[i - n] : Real(0);
    Real* dskip_src = skipped ? dskip_[static_cast<size_t>(L - 1 - i)].data() : nullptr;
    const bool mix = config_.x0_mixing;
    const std::array<double, 3> sums =
        residual_mix_backward(T, d, A.x_in.data(), mix ? x0_.data() : nullptr, skip_src, skip,
                              mix ? w.lambdas[0] : Real(1), mix ? w.lambdas[1] : Real(0), dx,
                              dx0_.data(), dskip_src, rounded_for_mlp(i - 1, false));
    if (mix) {
      g.lambdas[0] += static_cast<Real>(sums[0]);
      g.lambdas[1] += static_cast<Real>(sums[1]);
    }
    if (skip_src != nullptr) g_.skip_weights[i - n] += static_cast<Real>(sums[2]);
    stage_done(L - i);
  }
  // The first block's input is x0 itself.
  embed_norm_backward(T, d, tokens_.data(), x0_.data(), rstd0_.data(), dx0_.data(), dx,
                      dnorm_.data(), g_.embed);
  stage_done(L + 1);
  return loss_sum;
}

template <class Real>
double GptT<Real>::moe_aux_loss() const {
  double total = 0;
  for (int64_t i = 0; i < config_.num_layers; ++i) {
    if (config_.is_moe_layer(i)) total += layers_[static_cast<size_t>(i)].aux_loss;
  }
  return total;
}

template class GptT<float>;
template class GptT<double>;

}  // namespace nanogpt
