// Decoding runs the training forward's block code over a K/V cache, so its logits must be
// those of a full forward of the same sequence: fed token by token, or a prompt chunk in one
// call and then token by token. Bounds: 1e-5 in fp32; in bf16 2e-3 absolute on logits of
// magnitude ≤ 30 (products of different heights may block differently, and an activation on
// the other side of a bf16 rounding boundary moves the next product by 2⁻⁹ relative). Both
// paths run the same kernels on this machine and agree to the bit (printed), but the bounds
// leave the GEMM free to choose its blocking by shape. The sequence crosses documents (EOT)
// and 300 tokens with a one-block window keep the window mask active.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/fused_linear_cross_entropy.hpp"
#include "model/decoder.hpp"
#include "runtime/random.hpp"
#include "support/model.hpp"

namespace nanogpt {
namespace {

constexpr int64_t kTokens = 300, kWindow = 1;

template <class Real>
void perturb(GptT<Real>& model) {
  // The real initialisation zeroes the projections and the head; perturb everything so every
  // path carries signal.
  model.init_parameters(3);
  Rng rng(4);
  for (Real& p : model.params().values()) p += static_cast<Real>(0.05 * rng.normal());
}

std::vector<int32_t> test_sequence(const Config& c) {
  auto tokens = synthetic_tokens(kTokens, 9);
  std::vector<int32_t> inputs(tokens.begin(), tokens.end());
  // It must cross a document boundary and outgrow the window for the test to mean anything.
  EXPECT_NE(std::find(inputs.begin() + 1, inputs.end(), c.eot_id), inputs.end());
  EXPECT_GT(kTokens, 2 * kWindow * c.block_size);
  return inputs;
}

// The logits of every position of a full (training) forward.
std::vector<float> full_forward_logits(Gpt& model, const std::vector<int32_t>& inputs) {
  const Config& c = model.config();
  std::vector<int32_t> targets(inputs.size(), 0);
  model.forward_loss(inputs, targets, kWindow);
  const int64_t Vp = c.vocab_padded();
  std::vector<float> full(static_cast<size_t>(kTokens * Vp));
  FusedLossParams p;
  p.T = kTokens;
  p.d = c.model_dim;
  p.V = Vp;
  p.x = model.final_norm().data();
  p.W = model.weights().lm_head;
  p.softcap = static_cast<float>(c.logit_softcap);
  p.softcap_divisor = static_cast<float>(7.5 * std::sqrt(double(c.model_dim)));
  p.precision = model.precision();
  capped_logits(p, full.data());
  return full;
}

double worst_difference(const std::vector<float>& z, const std::vector<float>& full, int64_t t) {
  double worst = 0;
  const size_t Vp = z.size();
  for (size_t v = 0; v < Vp; ++v)
    worst = std::max(worst, double(std::abs(z[v] - full[static_cast<size_t>(t) * Vp + v])));
  return worst;
}

// prompt = 0: every token fed on its own; otherwise the first `prompt` tokens in one call.
void check_decoder_against_full_forward(const char* precision, int64_t prompt, double bound,
                                        Config c = micro_config()) {
  set_config_value(c, std::string("precision=") + precision);
  Gpt model(c);
  perturb(model);
  const std::vector<int32_t> inputs = test_sequence(c);
  const std::vector<float> full = full_forward_logits(model, inputs);
  const AlignedVector<float> full_norm = model.final_norm();

  GptDecoder decoder(model, kTokens, kWindow);
  double worst = 0;
  int64_t t = 0;
  if (prompt > 0) {
    const std::vector<float>& z = decoder.feed({inputs.data(), static_cast<size_t>(prompt)});
    EXPECT_EQ(decoder.position(), prompt);
    // Every row of the chunk, not only the last one whose logits come back.
    for (int64_t j = 0; j < prompt * c.model_dim; ++j) {
      worst = std::max(worst, double(std::abs(model.final_norm()[j] - full_norm[j])));
    }
    t = prompt;
    worst = std::max(worst, worst_difference(z, full, t - 1));
  }
  for (; t < kTokens; ++t)
    worst = std::max(worst, worst_difference(decoder.step(inputs[t]), full, t));
  std::printf(
      "decoder (%s, prompt %lld, %lld key/value heads): worst difference from the full forward "
      "%.2e\n",
      precision, static_cast<long long>(prompt), static_cast<long long>(c.num_kv_heads), worst);
  EXPECT_LT(worst, bound);
  EXPECT_THROW(decoder.step(1), InputError);  // context full
}

TEST(GptDecoder, TokenByTokenLogitsEqualFullForwardFp32) {
  check_decoder_against_full_forward("fp32", 0, 1e-5);
}

TEST(GptDecoder, TokenByTokenLogitsEqualFullForwardBf16) {
  check_decoder_against_full_forward("bf16", 0, 2e-3);
}

TEST(GptDecoder, PromptChunkThenTokensEqualFullForwardFp32) {
  check_decoder_against_full_forward("fp32", 170, 1e-5);
}

TEST(GptDecoder, PromptChunkThenTokensEqualFullForwardBf16) {
  check_decoder_against_full_forward("bf16", 170, 2e-3);
}

// Grouped-query attention: 4 query heads of 8 over num_kv_heads key/value heads.
Config gqa_config(int64_t kv_heads) {
  Config c = micro_config();
  c.num_heads = 4;
  c.head_dim = 8;
  c.num_kv_heads = kv_heads;
  return c;
}

TEST(GptDecoder, GroupedQueryAttentionDecodesAsTheFullForward) {
  check_decoder_against_full_forward("fp32", 170, 1e-5, gqa_config(2));
  check_decoder_against_full_forward("bf16", 0, 2e-3, gqa_config(1));
}

// Mixture-of-experts MLPs (blocks 1 and 3 of 6; 4 experts, top-2) route each token of a chunk
// or a step as the full forward routes it. fp32 only: in bf16 an activation a rounding away
// could move a token whose top-2 is nearly tied to another expert, which the bound cannot hold.
TEST(GptDecoder, MixtureOfExpertsDecodesAsTheFullForward) {
  Config c = micro_config();
  c.num_experts = 4;
  c.experts_per_token = 2;
  c.moe_layers = {1, 3};
  c.moe_hidden_dim = 48;
  check_decoder_against_full_forward("fp32", 0, 1e-5, c);
  check_decoder_against_full_forward("fp32", 170, 1e-5, c);
}

// Without value embeddings, U-net skips and x0 mixing, decoding runs the same reduced blocks.
TEST(GptDecoder, SwitchedOffComponentsDecodeAsTheFullForward) {
  Config c = micro_config();
  c.value_embeddings = c.unet_skips = c.x0_mixing = false;
  check_decoder_against_full_forward("fp32", 0, 1e-5, c);
  check_decoder_against_full_forward("fp32", 170, 1e-5, c);
}

// The cache holds H_kv·D keys and values per position and attention layer: num_heads /
// num_kv_heads times fewer bytes than one per query head.
TEST(GptDecoder, GroupedQueryAttentionShrinksTheCacheByTheGroupSize) {
  const int64_t capacity = 1000;
  const Config c = gqa_config(4);
  const int64_t full = KvCache(c, capacity).bytes();
  int64_t attention_layers = 0;
  for (int64_t i = 0; i < c.num_layers; ++i) attention_layers += c.has_attention(i) ? 1 : 0;
  EXPECT_EQ(full, 2 * attention_layers * capacity * c.num_heads * c.head_dim * 4);  // K, V fp32
  for (int64_t kv : {2, 1}) {
    const int64_t bytes = KvCache(gqa_config(kv), capacity).bytes();
    std::printf("K/V cache, %lld positions: %lld bytes with %lld key/value heads, %lld with 4\n",
                static_cast<long long>(capacity), static_cast<long long>(bytes),
                static_cast<long long>(kv), static_cast<long long>(full));
    EXPECT_EQ(bytes * (c.num_heads / kv), full);
  }
}

// The float64 model (reference kernels, including the reference attention over a cache) fed in
// uneven chunks gives the full forward's final-norm rows to rounding (1e-12).
TEST(GptDecoder, Float64ChunksOverTheCacheEqualFullForward) {
  Config c = micro_config();
  GptT<double> model(c);
  perturb(model);
  const std::vector<int32_t> inputs = test_sequence(c);
  std::vector<int32_t> targets(inputs.size(), 0);
  model.forward_loss(inputs, targets, kWindow);
  const AlignedVector<double> full = model.final_norm();
  KvCacheT<double> cache(c, kTokens);
  double worst = 0;
  for (int64_t t0 = 0, chunk = 1; t0 < kTokens; t0 += chunk, chunk = chunk * 3 % 97) {
    const int64_t n = std::min(chunk, kTokens - t0);
    model.forward_cached({inputs.data() + t0, static_cast<size_t>(n)}, kWindow, cache);
    for (int64_t j = 0; j < n * c.model_dim; ++j) {
      worst = std::max(worst, std::abs(model.final_norm()[j] - full[t0 * c.model_dim + j]));
    }
  }
  std::printf("float64 chunks: worst difference %.2e\n", worst);
  EXPECT_LT(worst, 1e-12);
  EXPECT_EQ(cache.length(), kTokens);
}

// Decoding keeps the weights packed between calls (model/packed_weights.hpp); after the
// parameters change (any non-const access: an optimizer step, a load) the next call must
// decode with the new weights, bit for bit as a model built with them, for the blocks' products
// and the head alike, in both precisions.
TEST(GptDecoder, PackedWeightsFollowChangedParameters) {
  for (const char* precision : {"fp32", "bf16"}) {
    Config c = micro_config();
    set_config_value(c, std::string("precision=") + precision);
    set_config_value(c, "fp8_head=false");
    const std::vector<int32_t> prompt = {5, 17, 3, 99, 42, 7};
    Gpt model(c);
    perturb(model);
    std::vector<float> before;
    {
      GptDecoder decoder(model, 16, kWindow);
      before = decoder.feed(prompt);
    }
    const size_t packed_bytes = model.packed_weight_bytes();
    EXPECT_GT(packed_bytes, 0u) << precision;
    // Change every weight through the parameters (as the optimizer does), then decode again.
    Rng rng(8);
    for (float& p : model.params().values()) p += static_cast<float>(0.05 * rng.normal());
    GptDecoder again(model, 16, kWindow);
    const std::vector<float> after = again.feed(prompt);

    Gpt fresh(c);
    fresh.params().values() = model.params().values();
    GptDecoder reference(fresh, 16, kWindow);
    const std::vector<float> expected = reference.feed(prompt);
    EXPECT_NE(before, after) << precision;
    EXPECT_EQ(0, std::memcmp(after.data(), expected.data(), after.size() * sizeof(float)))
        << precision << ": decoding after a change used stale packed weights";
    // Packed again in place: the same memory as before the change, not a second copy.
    EXPECT_EQ(model.packed_weight_bytes(), packed_bytes) << precision;
  }
}

TEST(GptDecoder, BadTokensAndAFullCacheAreInputErrors) {
  Config c = micro_config();
  Gpt model(c);
  model.init_parameters(3);
  GptDecoder decoder(model, 4, kWindow);
  EXPECT_THROW(decoder.step(-1), InputError);
  EXPECT_THROW(decoder.step(static_cast<int32_t>(c.vocab_size)), InputError);
  EXPECT_EQ(decoder.position(), 0);
  const std::vector<int32_t> five = {1, 2, 3, 4, 5};
  EXPECT_THROW(decoder.feed(five), InputError);
  EXPECT_EQ(decoder.position(), 0);
  decoder.feed({five.data(), 4});
  EXPECT_THROW(decoder.step(1), InputError);
  EXPECT_THROW(KvCache(c, 0), InputError);
}

}  // namespace
}  // namespace nanogpt
