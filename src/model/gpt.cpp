#include "model/gpt.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>

#include "kernels/dot.hpp"
#include "kernels/rmsnorm.hpp"
#include "model/model_kernels.hpp"
#include "runtime/error.hpp"
#include "runtime/profiler.hpp"
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

template <class V>
void resize(V& v, int64_t n) {
  v.resize(static_cast<size_t>(n));
}

// The element-wise passes run over fixed blocks of token rows. Block boundaries depend only on
// T, and reductions keep one partial sum per block, added in block order, so results are
// bitwise the same on any number of threads.
constexpr int64_t kRowBlock = 32;

int64_t row_blocks(int64_t T) {
  return (T + kRowBlock - 1) / kRowBlock;
}

// fn(block, t0, t1) for each block of rows [t0, t1), as one profiled operation that moves
// about `floats_per_row` values of 4 bytes per row.
template <class Fn>
void for_row_blocks(const char* name, int64_t T, int64_t floats_per_row, Fn&& fn) {
  ProfileScope scope("elementwise", name, {T}, 0.0, 4.0 * static_cast<double>(T * floats_per_row));
  const int64_t blocks = row_blocks(T);
  if (blocks == 1) {
    fn(int64_t{0}, int64_t{0}, T);
    return;
  }
  ThreadPool::current().parallel_for(static_cast<size_t>(blocks), [&](size_t b, int) {
    const int64_t t0 = static_cast<int64_t>(b) * kRowBlock;
    fn(static_cast<int64_t>(b), t0, std::min(T, t0 + kRowBlock));
  });
}

// Σ over blocks of k per-block partial sums, in block order.
template <size_t k>
std::array<double, k> sum_blocks(const std::vector<std::array<double, k>>& partial) {
  std::array<double, k> total{};
  for (const auto& p : partial) {
    for (size_t i = 0; i < k; ++i) total[i] += p[i];
  }
  return total;
}

}  // namespace

template <class Real>
GptT<Real>::GptT(const Config& config) : config_(config), precision_(resolved_precision(config)) {
  validate_config(config_);
  const int64_t V = config_.vocab_size, d = config_.model_dim;
  const int64_t HD = config_.num_heads * config_.head_dim, L = config_.num_layers;
  params_.add("embed.weight", {V, d}, ParamGroup::kEmbedding, ParamInit::kNormal);
  for (int k = 0; k < 3; ++k) {
    params_.add(value_embed_name(k), {V, d}, ParamGroup::kEmbedding, ParamInit::kNormal);
  }
  for (int64_t i = 0; i < L; ++i) {
    if (config_.has_attention(i)) {
      params_.add(block_name(i, "attn.qkv_w"), {3, HD, d}, ParamGroup::kMatrix,
                  ParamInit::kUniformFanIn);
      params_.add(block_name(i, "attn.lambdas"), {2}, ParamGroup::kScalar, ParamInit::kAttnLambdas);
      params_.add(block_name(i, "attn.c_proj.weight"), {d, HD}, ParamGroup::kMatrix,
                  ParamInit::kZero);
    }
    params_.add(block_name(i, "mlp.c_fc.weight"), {4 * d, d}, ParamGroup::kMatrix,
                ParamInit::kUniformFanIn);
    params_.add(block_name(i, "mlp.c_proj.weight"), {d, 4 * d}, ParamGroup::kMatrix,
                ParamInit::kZero);
    params_.add(block_name(i, "lambdas"), {2}, ParamGroup::kScalar, ParamInit::kBlockLambdas);
  }
  params_.add("lm_head.weight", {config_.vocab_padded(), d}, ParamGroup::kHead, ParamInit::kZero);
  params_.add("skip_weights", {L / 2}, ParamGroup::kScalar, ParamInit::kOnes);
  params_.allocate();
  grads_.assign(params_.size(), 0.0f);
  w_ = bind(params_.values().data());
  g_ = bind(grads_.data());
  layers_.resize(static_cast<size_t>(L));
  dskip_.resize(static_cast<size_t>(L / 2));
}

template <class Real>
GptWeights<Real> GptT<Real>::bind(Real* base) const {
  auto at = [&](const std::string& name) { return base + params_.info(name).offset; };
  GptWeights<Real> w;
  w.embed = at("embed.weight");
  for (int k = 0; k < 3; ++k) w.value_embeds[static_cast<size_t>(k)] = at(value_embed_name(k));
  w.lm_head = at("lm_head.weight");
  w.skip_weights = at("skip_weights");
  w.blocks.resize(static_cast<size_t>(config_.num_layers));
  for (int64_t i = 0; i < config_.num_layers; ++i) {
    BlockWeights<Real>& b = w.blocks[static_cast<size_t>(i)];
    if (config_.has_attention(i)) {
      b.qkv_w = at(block_name(i, "attn.qkv_w"));
      b.attn_lambdas = at(block_name(i, "attn.lambdas"));
      b.attn_proj = at(block_name(i, "attn.c_proj.weight"));
      const int ve = config_.value_embed_index(i);
      if (ve >= 0) b.value_embed = w.value_embeds[static_cast<size_t>(ve)];
    }
    b.c_fc = at(block_name(i, "mlp.c_fc.weight"));
    b.mlp_proj = at(block_name(i, "mlp.c_proj.weight"));
    b.lambdas = at(block_name(i, "lambdas"));
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
  return config_.is_long_window(layer) ? window_blocks : std::max<int64_t>(1, window_blocks / 2);
}

template <class Real>
void GptT<Real>::ensure_capacity(int64_t T, int64_t seq_len) {
  const int64_t d = config_.model_dim, HD = config_.num_heads * config_.head_dim;
  const int64_t H = config_.num_heads;
  if (rotary_.max_positions() < seq_len) rotary_ = RotaryTableT<Real>(seq_len, config_.head_dim);
  resize(tokens_, T);
  resize(doc_, T);
  resize(x0_, T * d);
  resize(rstd0_, T);
  for (int64_t i = 0; i < config_.num_layers; ++i) {
    LayerActivations& A = layers_[static_cast<size_t>(i)];
    resize(A.x_in, T * d);
    resize(A.x_mix, T * d);
    resize(A.x_attn, T * d);
    resize(A.norm2, T * d);
    resize(A.rstd2, T);
    resize(A.h, T * 4 * d);
    resize(A.x_out, T * d);
    if (config_.has_attention(i)) {
      resize(A.norm1, T * d);
      resize(A.rstd1, T);
      resize(A.qkv_raw, T * 3 * HD);
      resize(A.rstd_qk, T * 2 * H);
      resize(A.qkv, T * 3 * HD);
      resize(A.attn_out, T * HD);
      resize(A.lse, H * T);
    }
  }
  resize(final_norm_, T * d);
  resize(rstd_final_, T);
  resize(dx_, T * d);
  resize(dx0_, T * d);
  resize(dtmp_, T * 2 * HD);
  resize(dh_, T * 4 * d);
  resize(dqkv_, T * 3 * HD);
  resize(dattn_, T * HD);
  resize(dnorm_, T * d);
  for (auto& s : dskip_) resize(s, T * d);
}

template <class Real>
AttentionArgs<Real> GptT<Real>::attention_args(int64_t layer, int64_t window_blocks) const {
  // q, k, v are the three thirds of each token's row of the layer's qkv activation.
  const LayerActivations& A = layers_[static_cast<size_t>(layer)];
  const int64_t HD = config_.num_heads * config_.head_dim;
  AttentionArgs<Real> a;
  a.T = T_;
  a.H = config_.num_heads;
  a.D = config_.head_dim;
  a.q = A.qkv.data();
  a.k = A.qkv.data() + HD;
  a.v = A.qkv.data() + 2 * HD;
  a.ld = 3 * HD;
  a.doc = doc_.data();
  a.window_blocks = layer_window(layer, window_blocks);
  a.block_size = config_.block_size;
  a.scale = static_cast<float>(config_.attn_scale);
  a.precision = precision_;
  return a;
}

template <class Real>
void GptT<Real>::compute_doc_ids(std::span<const int32_t> inputs, int64_t seq_len) {
  // An EOT token belongs to the document it starts; so does a sequence's first token, which
  // keeps the sequences of a batch from seeing each other.
  int32_t doc = 0;
  for (size_t t = 0; t < inputs.size(); ++t) {
    if (inputs[t] == config_.eot_id || static_cast<int64_t>(t) % seq_len == 0) ++doc;
    doc_[t] = doc;
  }
}

template <class Real>
void GptT<Real>::forward(std::span<const int32_t> inputs, int64_t window_blocks, int64_t seq_len) {
  const int64_t T = static_cast<int64_t>(inputs.size());
  const int64_t d = config_.model_dim, H = config_.num_heads, D = config_.head_dim;
  const int64_t HD = H * D, L = config_.num_layers, n = L / 2, V = config_.vocab_size;
  if (T == 0) throw InputError("cannot run the model on an empty sequence");
  if (seq_len == 0) seq_len = T;
  if (seq_len < 0 || T % seq_len != 0) {
    throw InputError("a batch of " + std::to_string(T) + " tokens is not a whole number of " +
                     std::to_string(seq_len) + "-token sequences");
  }
  if (seq_len != T && seq_len % config_.block_size != 0) {
    throw InputError("batched sequences of " + std::to_string(seq_len) +
                     " tokens: the length must be a multiple of block_size (" +
                     std::to_string(config_.block_size) +
                     ") so the window mask restarts with "
                     "each sequence; run them one at a time instead");
  }
  ensure_capacity(T, seq_len);
  T_ = T;
  seq_len_ = seq_len;
  window_blocks_ = window_blocks;
  for (int64_t t = 0; t < T; ++t) {
    if (inputs[t] < 0 || inputs[t] >= V) {
      throw InputError("token id " + std::to_string(inputs[t]) + " at position " +
                       std::to_string(t) + " is outside the vocabulary (" + std::to_string(V) +
                       ")");
    }
    tokens_[t] = inputs[t];
  }
  compute_doc_ids(inputs, seq_len);

  const Real* embed = w_.embed;
  for_row_blocks("embed.norm", T, 3 * d, [&](int64_t, int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t)
      std::memcpy(&x0_[t * d], embed + tokens_[t] * d, d * sizeof(Real));
    rmsnorm_forward(&x0_[t0 * d], d, &x0_[t0 * d], d, &rstd0_[t0], t1 - t0, d);
  });

  const Real* x_prev = x0_.data();
  for (int64_t i = 0; i < L; ++i) {
    LayerActivations& A = layers_[static_cast<size_t>(i)];
    const BlockWeights<Real>& w = w_.blocks[static_cast<size_t>(i)];
    const Real skip = i >= n ? w_.skip_weights[i - n] : Real(0);
    const Real* skip_src = i >= n ? layers_[static_cast<size_t>(L - 1 - i)].x_out.data() : nullptr;
    const Real l0 = w.lambdas[0], l1 = w.lambdas[1];
    const bool attention = config_.has_attention(i);
    // One pass: the skip, the x0 mix, the residual's copy, and the attention's norm.
    for_row_blocks("residual_mix.norm1", T, 4 * d, [&](int64_t, int64_t t0, int64_t t1) {
      for (int64_t j = t0 * d; j < t1 * d; ++j) {
        const Real x_in = skip_src != nullptr ? x_prev[j] + skip * skip_src[j] : x_prev[j];
        A.x_in[j] = x_in;
        A.x_mix[j] = l0 * x_in + l1 * x0_[j];
        A.x_attn[j] = A.x_mix[j];
      }
      if (attention) {
        rmsnorm_forward(&A.x_mix[t0 * d], d, &A.norm1[t0 * d], d, &A.rstd1[t0], t1 - t0, d);
      }
    });
    if (attention) {
      model_gemm(precision_, "attn.qkv.fwd", Trans::kNo, Trans::kYes, T, 3 * HD, d, Real(1),
                 A.norm1.data(), d, w.qkv_w, d, Real(0), A.qkv_raw.data(), 3 * HD);
      const Real* ve = w.value_embed;
      const Real la0 = w.attn_lambdas[0], la1 = w.attn_lambdas[1];
      for_row_blocks("qk_norm.rotary.v_mix", T, 3 * d, [&](int64_t, int64_t t0, int64_t t1) {
        for (int64_t t = t0; t < t1; ++t) {
          const Real* raw = &A.qkv_raw[t * 3 * HD];
          Real* out = &A.qkv[t * 3 * HD];
          // q and k: 2H heads of D, normalised per head, then rotated.
          rmsnorm_forward(raw, D, out, D, &A.rstd_qk[t * 2 * H], 2 * H, D);
          rotary_.apply(out, 2 * H, t % seq_len);
          const Real* vrow = ve == nullptr ? nullptr : ve + tokens_[t] * d;
          for (int64_t e = 0; e < HD; ++e) {
            out[2 * HD + e] = la0 * raw[2 * HD + e] + (vrow != nullptr ? la1 * vrow[e] : Real(0));
          }
        }
      });
      const AttentionArgs<Real> ap = attention_args(i, window_blocks);
      model_attention_forward(ap, A.attn_out.data(), A.lse.data());
      model_gemm(precision_, "attn.c_proj.fwd", Trans::kNo, Trans::kYes, T, d, HD, Real(1),
                 A.attn_out.data(), HD, w.attn_proj, HD, Real(1), A.x_attn.data(), d);
    }
    for_row_blocks("norm2", T, 3 * d, [&](int64_t, int64_t t0, int64_t t1) {
      rmsnorm_forward(&A.x_attn[t0 * d], d, &A.norm2[t0 * d], d, &A.rstd2[t0], t1 - t0, d);
      std::memcpy(&A.x_out[t0 * d], &A.x_attn[t0 * d], (t1 - t0) * d * sizeof(Real));
    });
    ReluSquaredEpilogue<Real> relu2;
    relu2.relu_squared = true;
    model_gemm(precision_, "mlp.c_fc.fwd.relu2", Trans::kNo, Trans::kYes, T, 4 * d, d, Real(1),
               A.norm2.data(), d, w.c_fc, d, Real(0), A.h.data(), 4 * d, relu2);
    model_gemm(precision_, "mlp.c_proj.fwd", Trans::kNo, Trans::kYes, T, d, 4 * d, Real(1),
               A.h.data(), 4 * d, w.mlp_proj, 4 * d, Real(1), A.x_out.data(), d);
    x_prev = A.x_out.data();
  }
  for_row_blocks("final_norm", T, 2 * d, [&](int64_t, int64_t t0, int64_t t1) {
    rmsnorm_forward(x_prev + t0 * d, d, &final_norm_[t0 * d], d, &rstd_final_[t0], t1 - t0, d);
  });
}

namespace {

template <class Real>
LossArgs<Real> loss_params(const Config& c, const Real* x, const Real* W, const int32_t* targets,
                           int64_t T) {
  LossArgs<Real> p;
  p.precision = resolved_precision(c);
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
                                int64_t window_blocks, Real* per_token, int64_t seq_len) {
  check_targets(targets, static_cast<int64_t>(inputs.size()), config_.vocab_size);
  forward(inputs, window_blocks, seq_len);
  LossArgs<Real> p = loss_params(config_, final_norm_.data(), w_.lm_head, targets.data(), T_);
  return model_loss_forward(p, per_token);
}

template <class Real>
double GptT<Real>::forward_backward(std::span<const int32_t> inputs,
                                    std::span<const int32_t> targets, int64_t window_blocks,
                                    float loss_scale, int64_t seq_len) {
  check_targets(targets, static_cast<int64_t>(inputs.size()), config_.vocab_size);
  forward(inputs, window_blocks, seq_len);
  const int64_t T = T_;
  const int64_t d = config_.model_dim, H = config_.num_heads, D = config_.head_dim;
  const int64_t HD = H * D, L = config_.num_layers, n = L / 2;

  // Head: fused lm_head + soft-cap + cross-entropy, then the final norm.
  LossArgs<Real> p = loss_params(config_, final_norm_.data(), w_.lm_head, targets.data(), T);
  p.loss_scale = loss_scale;
  const double loss_sum = model_loss_backward(p, dnorm_.data(), g_.lm_head);
  for_row_blocks("final_norm.bwd", T, 3 * d, [&](int64_t, int64_t t0, int64_t t1) {
    rmsnorm_backward(&final_norm_[t0 * d], d, &rstd_final_[t0], &dnorm_[t0 * d], d, &dx_[t0 * d], d,
                     t1 - t0, d, false);
  });

  std::fill(dx0_.begin(), dx0_.end(), Real(0));
  for (auto& s : dskip_) std::fill(s.begin(), s.end(), Real(0));
  Real* dx = dx_.data();
  Real* skip_grad = g_.skip_weights;
  const Real* skip_w = w_.skip_weights;

  for (int64_t i = L - 1; i >= 0; --i) {
    LayerActivations& A = layers_[static_cast<size_t>(i)];
    const BlockWeights<Real>& w = w_.blocks[static_cast<size_t>(i)];
    const BlockWeights<Real>& g = g_.blocks[static_cast<size_t>(i)];
    // dx is the gradient of this block's output; the first half's outputs also fed a skip.
    // MLP: x_out = x_attn + relu²(norm2·c_fcᵀ)·mlp_projᵀ
    if (i < n) {
      const Real* ds = dskip_[static_cast<size_t>(i)].data();
      for_row_blocks("skip.bwd", T, 3 * d, [&](int64_t, int64_t t0, int64_t t1) {
        for (int64_t j = t0 * d; j < t1 * d; ++j) dx[j] += ds[j];
      });
    }
    model_gemm(precision_, "mlp.c_proj.dW", Trans::kYes, Trans::kNo, d, 4 * d, T, Real(1), dx, d,
               A.h.data(), 4 * d, Real(1), g.mlp_proj, 4 * d);
    // dh_ = the gradient of c_fc's output: that of h times relu²'s derivative (from h), in the
    // product's epilogue.
    ReluSquaredEpilogue<Real> relu2_grad;
    relu2_grad.relu_squared_output = A.h.data();
    relu2_grad.ld = 4 * d;
    model_gemm(precision_, "mlp.c_proj.dX.relu2_bwd", Trans::kNo, Trans::kNo, T, 4 * d, d, Real(1),
               dx, d, w.mlp_proj, 4 * d, Real(0), dh_.data(), 4 * d, relu2_grad);
    model_gemm(precision_, "mlp.c_fc.dW", Trans::kYes, Trans::kNo, 4 * d, d, T, Real(1), dh_.data(),
               4 * d, A.norm2.data(), d, Real(1), g.c_fc, d);
    model_gemm(precision_, "mlp.c_fc.dX", Trans::kNo, Trans::kNo, T, d, 4 * d, Real(1), dh_.data(),
               4 * d, w.c_fc, d, Real(0), dnorm_.data(), d);
    for_row_blocks("norm2.bwd", T, 4 * d, [&](int64_t, int64_t t0, int64_t t1) {
      rmsnorm_backward(&A.norm2[t0 * d], d, &A.rstd2[t0], &dnorm_[t0 * d], d, dx + t0 * d, d,
                       t1 - t0, d, true);
    });
    // dx is now d(x_attn).

    if (config_.has_attention(i)) {
      model_gemm(precision_, "attn.c_proj.dW", Trans::kYes, Trans::kNo, d, HD, T, Real(1), dx, d,
                 A.attn_out.data(), HD, Real(1), g.attn_proj, HD);
      model_gemm(precision_, "attn.c_proj.dX", Trans::kNo, Trans::kNo, T, HD, d, Real(1), dx, d,
                 w.attn_proj, HD, Real(0), dattn_.data(), HD);
      const AttentionArgs<Real> ap = attention_args(i, window_blocks_);
      model_attention_backward(ap, A.attn_out.data(), A.lse.data(), dattn_.data(), dqkv_.data(),
                               dqkv_.data() + HD, dqkv_.data() + 2 * HD);

      // v = λa0·v_raw + λa1·ve
      const Real* ve = w.value_embed;
      Real* dve = g.value_embed;
      const Real la0 = w.attn_lambdas[0], la1 = w.attn_lambdas[1];
      // Tokens repeat, so rows of the value embedding's gradient are shared: accumulated
      // serially, in token order, before the parallel pass rescales dv.
      if (dve != nullptr) {
        for (int64_t t = 0; t < T; ++t) {
          const Real* gv = &dqkv_[t * 3 * HD + 2 * HD];
          Real* dvrow = dve + tokens_[t] * d;
          for (int64_t e = 0; e < HD; ++e) dvrow[e] += la1 * gv[e];
        }
      }
      std::vector<std::array<double, 2>> dla(static_cast<size_t>(row_blocks(T)));
      for_row_blocks("qk_norm.rotary.v_mix.bwd", T, 9 * d, [&](int64_t b, int64_t t0, int64_t t1) {
        double dla0 = 0, dla1 = 0;
        for (int64_t t = t0; t < t1; ++t) {
          Real* drow = &dqkv_[t * 3 * HD];
          const Real* raw = &A.qkv_raw[t * 3 * HD];
          const Real* vrow = ve == nullptr ? nullptr : ve + tokens_[t] * d;
          dla0 += dot_double(drow + 2 * HD, raw + 2 * HD, HD);
          if (vrow != nullptr) dla1 += dot_double(drow + 2 * HD, vrow, HD);
          for (int64_t e = 0; e < HD; ++e) drow[2 * HD + e] *= la0;
          // q, k: undo the rotation on the gradient, then the per-head norm. dtmp_ holds
          // each token's normalised q, k before RoPE.
          rotary_.apply_inverse(drow, 2 * H, t % seq_len_);
          Real* y = &dtmp_[t * 2 * HD];
          std::memcpy(y, &A.qkv[t * 3 * HD], 2 * HD * sizeof(Real));
          rotary_.apply_inverse(y, 2 * H, t % seq_len_);
          rmsnorm_backward(y, D, &A.rstd_qk[t * 2 * H], drow, D, drow, D, 2 * H, D, false);
        }
        dla[static_cast<size_t>(b)] = {dla0, dla1};
      });
      const std::array<double, 2> dla_sum = sum_blocks(dla);
      g.attn_lambdas[0] += static_cast<Real>(dla_sum[0]);
      g.attn_lambdas[1] += static_cast<Real>(dla_sum[1]);
      model_gemm(precision_, "attn.qkv.dW", Trans::kYes, Trans::kNo, 3 * HD, d, T, Real(1),
                 dqkv_.data(), 3 * HD, A.norm1.data(), d, Real(1), g.qkv_w, d);
      model_gemm(precision_, "attn.qkv.dX", Trans::kNo, Trans::kNo, T, d, 3 * HD, Real(1),
                 dqkv_.data(), 3 * HD, w.qkv_w, d, Real(0), dnorm_.data(), d);
      for_row_blocks("norm1.bwd", T, 4 * d, [&](int64_t, int64_t t0, int64_t t1) {
        rmsnorm_backward(&A.norm1[t0 * d], d, &A.rstd1[t0], &dnorm_[t0 * d], d, dx + t0 * d, d,
                         t1 - t0, d, true);
      });
    }
    // dx is now d(x_mix); x_mix = λ0·x_in + λ1·x0 ...
    const Real l0 = w.lambdas[0], l1 = w.lambdas[1];
    // ... then, for the second half, x_in = x_prev + s·skip_source. One pass does both.
    const Real* src = i >= n ? layers_[static_cast<size_t>(L - 1 - i)].x_out.data() : nullptr;
    const Real s = i >= n ? skip_w[i - n] : Real(0);
    Real* dskip_out = i >= n ? dskip_[static_cast<size_t>(L - 1 - i)].data() : nullptr;
    std::vector<std::array<double, 3>> partial(static_cast<size_t>(row_blocks(T)));
    for_row_blocks("residual_mix.bwd", T, 7 * d, [&](int64_t b, int64_t t0, int64_t t1) {
      const int64_t j0 = t0 * d, len = (t1 - t0) * d;
      const double dl0 = dot_double(dx + j0, A.x_in.data() + j0, len);
      const double dl1 = dot_double(dx + j0, x0_.data() + j0, len);
      for (int64_t j = j0; j < j0 + len; ++j) {
        const Real gm = dx[j];
        dx0_[j] += l1 * gm;
        dx[j] = l0 * gm;  // d(x_in)
      }
      double dsw = 0;
      if (src != nullptr) {
        dsw = dot_double(dx + j0, src + j0, len);
        for (int64_t j = j0; j < j0 + len; ++j) dskip_out[j] += s * dx[j];
      }
      partial[static_cast<size_t>(b)] = {dl0, dl1, dsw};
    });
    const std::array<double, 3> sums = sum_blocks(partial);
    g.lambdas[0] += static_cast<Real>(sums[0]);
    g.lambdas[1] += static_cast<Real>(sums[1]);
    if (src != nullptr) skip_grad[i - n] += static_cast<Real>(sums[2]);
  }
  // The first block's input is x0 itself.
  for_row_blocks("embed.norm.bwd", T, 4 * d, [&](int64_t, int64_t t0, int64_t t1) {
    for (int64_t j = t0 * d; j < t1 * d; ++j) dx0_[j] += dx[j];
    rmsnorm_backward(&x0_[t0 * d], d, &rstd0_[t0], &dx0_[t0 * d], d, &dnorm_[t0 * d], d, t1 - t0, d,
                     false);
  });
  Real* gembed = g_.embed;
  for (int64_t t = 0; t < T; ++t) {
    Real* row = gembed + tokens_[t] * d;
    const Real* src = &dnorm_[t * d];
    for (int64_t e = 0; e < d; ++e) row[e] += src[e];
  }
  return loss_sum;
}

template class GptT<float>;
template class GptT<double>;

}  // namespace nanogpt
