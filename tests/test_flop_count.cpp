// FLOP counts against numbers worked out by hand for small configurations, the attention pair
// count against the mask itself, and the layer windows against the model's.
#include <gtest/gtest.h>

#include "kernels/attention_internal.hpp"
#include "model/flop_count.hpp"
#include "model/gpt.hpp"
#include "optim/newton_schulz.hpp"
#include "support/model.hpp"
#include "train/train_step.hpp"

namespace nanogpt {
namespace {

// micro_config (d = 32, 2 heads of 16, vocab 300 → padded 384, 6 layers, layer 3 without
// attention, T = 128, two sequences per step) with 32-token blocks, so the window matters.
Config small() {
  Config c = micro_config();
  c.block_size = 32;
  return c;
}

TEST(FlopCount, AttentionPairsByHand) {
  // W = 4 blocks covers all of T = 128: the full causal triangle, 128·129/2.
  EXPECT_EQ(attention_pairs(128, 4, 32), 8256);
  EXPECT_EQ(attention_pairs(128, 100, 32), 8256);
  // W = 1: each block of 32 is its own triangle, 4 · 32·33/2.
  EXPECT_EQ(attention_pairs(128, 1, 32), 4 * 528);
  // W = 2: block 0 is a triangle (528); in blocks 1..3 query r of the block sees 33 + r keys,
  // Σ_{r<32} (33 + r) = 1056 + 496 = 1552.
  EXPECT_EQ(attention_pairs(128, 2, 32), 528 + 3 * 1552);
  // A last block cut short: T = 40, W = 1: 32·33/2 + 8·9/2.
  EXPECT_EQ(attention_pairs(40, 1, 32), 528 + 36);
  EXPECT_EQ(attention_pairs(0, 1, 32), 0);
  EXPECT_THROW(attention_pairs(128, 0, 32), Error);
}

TEST(FlopCount, AttentionPairsMatchTheMask) {
  // The rule of kernels/attention.hpp for one document: j <= i and i/bs - j/bs < W.
  for (int64_t T : {1, 7, 64, 100, 129}) {
    for (int64_t bs : {1, 16, 32}) {
      for (int64_t W : {1, 2, 3, 5, 50}) {
        int64_t brute = 0;
        for (int64_t i = 0; i < T; ++i) {
          for (int64_t j = 0; j <= i; ++j) brute += (i / bs - j / bs < W) ? 1 : 0;
        }
        EXPECT_EQ(attention_pairs(T, W, bs), brute) << "T=" << T << " bs=" << bs << " W=" << W;
      }
    }
  }
}

TEST(FlopCount, LayerWindowsMatchTheModel) {
  Config c = small();
  Gpt model(c);
  for (int64_t W : {1, 2, 3, 4, 9}) {
    const std::vector<int64_t> w = layer_windows(c, W);
    ASSERT_EQ(w.size(), 6u);
    for (int64_t i = 0; i < 6; ++i) {
      EXPECT_EQ(w[i], c.has_attention(i) ? model.layer_window(i, W) : 0) << i << " " << W;
    }
  }
  // 6 layers: long windows at 0, 4 (every fourth) and 5 (the last); 3 has no attention.
  EXPECT_EQ(layer_windows(c, 4), (std::vector<int64_t>{4, 2, 2, 0, 4, 4}));
  EXPECT_EQ(layer_windows(c, 1), (std::vector<int64_t>{1, 1, 1, 0, 1, 1}));
  Config seed = preset("speedrun");  // the seed's 12-layer pattern, layer 7 attention-free
  EXPECT_EQ(layer_windows(seed, 13), (std::vector<int64_t>{13, 6, 6, 6, 13, 6, 6, 0, 6, 6, 6, 13}));
}

TEST(FlopCount, NewtonSchulzByHand) {
  // 32×32: Gram 2·32·32·32, its square 2·32·32·32, B·X 2·32·32·32 per iteration.
  EXPECT_EQ(newton_schulz_flops(32, 32, 1), 3 * 65536.0);
  EXPECT_EQ(newton_schulz_flops(32, 32, 5), 15 * 65536.0);
  // 128×32 (tall) works on the 32×32 Gram of its columns: 2·32·32·128 + 2·32·32·32 +
  // 2·32·32·128; 32×128 (wide) the same.
  EXPECT_EQ(newton_schulz_flops(128, 32, 1), 262144.0 + 65536.0 + 262144.0);
  EXPECT_EQ(newton_schulz_flops(32, 128, 1), newton_schulz_flops(128, 32, 1));
  // k = 256 on two threads, in blocks of 192 rows: the symmetric products multiply blocks
  // [0, 192) × [0, 192) and [192, 256) × [0, 256): 2·192·192·inner + 2·64·256·inner, inner = 256
  // for both the Gram and its square; B·X is the full 2·256³.
  const double sym = 2.0 * 192 * 192 * 256 + 2.0 * 64 * 256 * 256;
  EXPECT_EQ(newton_schulz_flops(256, 256, 1, 2), 2 * sym + 2.0 * 256 * 256 * 256);
  // On one thread, in blocks of 96: [0, 96) × [0, 96), [96, 192) × [0, 192), [192, 256) × [0, 256).
  const double serial = 2.0 * (96 * 96 + 96 * 192 + 64 * 256) * 256;
  EXPECT_EQ(newton_schulz_flops(256, 256, 1), 2 * serial + 2.0 * 256 * 256 * 256);
}

TEST(FlopCount, TrainStepOfASmallConfigByHand) {
  const Config c = small();
  const FlopCount f = train_step_flops(c, 4);
  const double seqs = 2;
  // Linear, per token: 5 attention layers × (2·32·96 + 2·32·32) + 6 MLPs × 2·(2·32·128).
  const double linear = 5 * (6144 + 2048) + 6 * 16384;
  EXPECT_EQ(f.linear_fwd, seqs * 128 * linear);
  EXPECT_EQ(f.linear_bwd, 2 * f.linear_fwd);
  // Attention: layers 0, 4, 5 see 4 blocks (8256 pairs), layers 1, 2 two (5184 pairs); per pair
  // and head QKᵀ and PV are 2·16 each, so 4·16·2 = 128 FLOPs per pair over both heads.
  const double pairs = 3 * 8256 + 2 * 5184;
  EXPECT_EQ(f.attention_fwd, seqs * 128 * pairs);
  EXPECT_EQ(f.attention_bwd, seqs * 256 * pairs);  // dP, dV, dK, dQ
  // S once more: the dK/dV pass keeps dS for dQ (128 tokens fit the budget).
  ASSERT_TRUE(attention_keeps_score_gradients(c, 128, 4));
  EXPECT_EQ(f.attention_bwd_recompute, seqs * 64 * pairs);
  // Without room for dS, the dQ pass recomputes S and dP as well.
  const int64_t budget = set_attention_stored_gradient_budget(0);
  const FlopCount recomputed = train_step_flops(c, 4);
  set_attention_stored_gradient_budget(budget);
  EXPECT_EQ(recomputed.attention_bwd_recompute, seqs * 192 * pairs);  // S twice, dP once more
  // Head: 2·T·Vp·d = 2·128·384·32 per sequence.
  const double head = 2.0 * 128 * 384 * 32;
  EXPECT_EQ(f.lm_head_fwd, seqs * head);
  EXPECT_EQ(f.lm_head_bwd, seqs * 2 * head);  // the logits are not computed twice
  // Newton–Schulz, 5 iterations: per attention layer q, k, v and c_proj (32×32 each), per
  // layer c_fc (128×32) and mlp.c_proj (32×128).
  const double ns32 = 5 * 3 * 65536.0, ns128 = 5 * (262144.0 + 65536.0 + 262144.0);
  EXPECT_EQ(f.newton_schulz, 5 * 4 * ns32 + 6 * 2 * ns128);
  EXPECT_EQ(f.model(), 3 * f.linear_fwd + 3 * f.attention_fwd + 3 * f.lm_head_fwd);
  EXPECT_EQ(f.total(), f.model() + f.attention_bwd_recompute + f.newton_schulz);
  EXPECT_FALSE(f.to_json().contains("lm_head_bwd_recompute"));
}

TEST(FlopCount, LinearAndHeadAreSixFlopsPerWeightPerToken) {
  // The classic 6·N·tokens, with N counted from the model's own parameter list rather than
  // from the formula under test.
  const Config c = small();
  Gpt model(c);
  double matrices = 0, head = 0;
  for (const ParamTensor& t : model.params().tensors()) {
    if (t.group == ParamGroup::kMatrix) matrices += static_cast<double>(t.numel);
    if (t.group == ParamGroup::kHead) head += static_cast<double>(t.numel);
  }
  const FlopCount f = train_step_flops(c, 1);
  const double tokens = static_cast<double>(c.tokens_per_step);
  EXPECT_EQ(f.linear_fwd + f.linear_bwd, 6 * matrices * tokens);
  EXPECT_EQ(f.lm_head_fwd + f.lm_head_bwd, 6 * head * tokens);
}

// A mixture of experts counts the weights a token goes through: the router and k of the E
// experts; Muon orthogonalises all E experts' matrices.
TEST(FlopCount, MixtureOfExpertsCountsTheActiveWeights) {
  Config c = small();
  c.num_experts = 4;
  c.experts_per_token = 2;
  c.moe_layers = {1, 3};
  Gpt model(c);
  double active = 0;
  for (const ParamTensor& t : model.params().tensors()) {
    const double n = static_cast<double>(t.numel);
    if (t.group == ParamGroup::kRouter) active += n;
    if (t.group != ParamGroup::kMatrix) continue;
    active += t.name.find("experts") != std::string::npos ? n / 4 * 2 : n;
  }
  const FlopCount f = train_step_flops(c, 1);
  EXPECT_EQ(f.linear_fwd + f.linear_bwd, 6 * active * static_cast<double>(c.tokens_per_step));
  // moe_hidden_dim 0: each expert is as wide as the dense MLP, so 3 more MLPs' worth per layer.
  const int64_t d = c.model_dim, s = c.muon_ns_steps;
  const double mlp = newton_schulz_flops(4 * d, d, s) + newton_schulz_flops(d, 4 * d, s);
  EXPECT_EQ(f.newton_schulz, train_step_flops(small(), 1).newton_schulz + 2 * 3 * mlp);
}

TEST(FlopCount, ForwardOnlyForEvaluation) {
  const Config c = small();
  const FlopCount f = sequence_flops(c, 128, 4, /*backward=*/false);
  EXPECT_EQ(
      f.linear_bwd + f.attention_bwd + f.attention_bwd_recompute + f.lm_head_bwd + f.newton_schulz,
      0.0);
  EXPECT_EQ(f.total(), f.forward());
  EXPECT_EQ(f.forward() * 2, train_step_flops(c, 4).forward());
}

TEST(FlopCount, SpeedrunLinearMatchesTheSeedsParameterCount) {
  // The seed's blocks: 11 attention layers of 4·768² and 12 MLPs of 8·768².
  const Config c = preset("speedrun");
  const FlopCount f = train_step_flops(c, 13);
  const double n = 11 * 4 * 768.0 * 768 + 12 * 8 * 768.0 * 768;
  EXPECT_EQ(f.linear_fwd, 2 * n * static_cast<double>(c.tokens_per_step));
  EXPECT_EQ(f.to_json()["newton_schulz"].get<double>(), f.newton_schulz);
}

}  // namespace
}  // namespace nanogpt
