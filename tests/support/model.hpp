// A micro configuration and synthetic token shards for model, trainer and decoder tests.
#pragma once

#include <algorithm>
#include <cmath>
#include <random>
#include <stdexcept>

#include "config/config.hpp"
#include "data/token_shard.hpp"
#include "model/gpt.hpp"
#include "runtime/random.hpp"
#include "runtime/thread_pool.hpp"

namespace nanogpt {

inline Config micro_config() {
  Config c = preset("cpu");
  c.vocab_size = 300;
  c.eot_id = 299;
  c.num_layers = 6;
  c.num_heads = 2;
  c.head_dim = 16;
  c.model_dim = 32;
  c.attn_free_layers = {3};
  c.train_seq_len = 128;
  c.tokens_per_step = 256;  // two sequences: gradient accumulation
  c.val_seq_len = 128;
  c.val_tokens = 256;
  c.num_iterations = 6;
  c.val_loss_every = 2;
  c.checkpoint_every = 2;
  c.max_window_tokens = 256;
  c.muon_momentum_warmup = 4;
  // A 256-token batch is far noisier than the seed's; smaller Adam steps keep it stable.
  c.adam_embed_lr = 0.05;
  c.adam_head_lr = 0.02;
  c.adam_scalar_lr = 0.01;
  return c;
}

// Documents of a tiny "language": each starts with EOT, then mostly follows a fixed bigram
// rule (next = 31·prev + 7 mod 200) with 10% random tokens, so a model can learn it quickly.
inline std::vector<uint32_t> synthetic_tokens(size_t count, uint32_t seed, uint32_t eot = 299) {
  std::mt19937 rng(seed);
  std::vector<uint32_t> out;
  while (out.size() < count) {
    out.push_back(eot);
    uint32_t t = rng() % 200;
    const size_t len = 20 + rng() % 150;
    for (size_t i = 0; i < len && out.size() < count; ++i) {
      out.push_back(t);
      t = rng() % 10 == 0 ? rng() % 200 : (31 * t + 7) % 200;
    }
  }
  out.resize(count);
  return out;
}

inline void write_synthetic_shards(const std::string& dir) {
  ShardWriter train(dir, "train", 1u << 20);
  train.append(synthetic_tokens(20000, 1));
  train.finish();
  ShardWriter val(dir, "val", 1u << 20);
  val.append(synthetic_tokens(2000, 2));
  val.finish();
}

// Tokens for the finite-difference tests (vocabulary 100, EOT 99): documents start at 0, 40, 41
// and 150, so T = 160 crosses a 128-token mask block. T must exceed 150.
inline std::vector<int32_t> fd_tokens(int64_t T, uint32_t seed) {
  if (T <= 150)
    throw std::invalid_argument("fd_tokens: T must exceed 150 (a document starts there)");
  Rng rng(seed);
  std::vector<int32_t> t(static_cast<size_t>(T + 1));
  for (auto& x : t) x = static_cast<int32_t>(rng.next_u64() % 99);
  for (int64_t p : {0, 40, 41, 150}) t[static_cast<size_t>(p)] = 99;
  return t;
}

// The real initialisation zeroes the projections and lm_head; perturb every parameter so each
// gradient path carries signal. Values are float-representable so the float and float64
// instantiations hold identical weights.
template <class Real>
void randomize(GptT<Real>& model, uint64_t seed) {
  model.init_parameters(seed);
  Rng rng(seed + 1);
  for (Real& p : model.params().values())
    p = static_cast<Real>(static_cast<float>(p + 0.3 * rng.normal()));
}

// One forward/backward of 200 tokens (several row blocks and a partial last one, across two
// 128-token mask blocks) on `threads` threads, for the thread-invariance tests.
struct StepResult {
  double loss = 0;
  AlignedVector<float> grads;
};

inline StepResult run_step(const Config& c, int threads) {
  ThreadPool pool(threads);
  ThreadPool::Use use(pool);
  Gpt model(c);
  model.init_parameters(5);
  Rng rng(6);
  for (float& p : model.params().values()) p += static_cast<float>(0.05 * rng.normal());
  auto tokens = synthetic_tokens(201, 11);
  std::vector<int32_t> in(tokens.begin(), tokens.end() - 1), tg(tokens.begin() + 1, tokens.end());
  model.zero_grads();
  StepResult r;
  r.loss = model.forward_backward(in, tg, 2, 1.0f / 200);
  r.grads = model.grads();
  return r;
}

// ‖fast − ref‖ / ‖ref‖ over one parameter tensor's gradient: the fp32 path against float64.
inline double gradient_relative_error(const ParamTensor& t, const float* fast, const double* ref) {
  double num = 0, den = 0;
  for (size_t i = t.offset; i < t.offset + t.numel; ++i) {
    const double a = fast[i], b = ref[i];
    num += (a - b) * (a - b);
    den += b * b;
  }
  return std::sqrt(num / std::max(den, 1e-300));
}

}  // namespace nanogpt
