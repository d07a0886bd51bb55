// The model's backward checked by finite differences in float64: the same model code
// instantiated with double and float64 reference kernels, on a micro configuration that still
// has every feature (value embeddings at both ends, an attention-free layer, U-net skips,
// several documents, a window shorter than the sequence), with one key/value head per query
// head and with multi-query attention (num_kv_heads = 1: both query heads share one k, v),
// and with the switchable components (value embeddings, skips, x0 mixing) off.
#include <gtest/gtest.h>

#include <cmath>

#include "model/gpt.hpp"
#include "runtime/error.hpp"
#include "runtime/random.hpp"
#include "support/model.hpp"

namespace nanogpt {
namespace {

Config fd_config() {
  Config c = micro_config();
  c.vocab_size = 100;  // padded to 128
  c.eot_id = 99;
  c.head_dim = 8;
  c.model_dim = 16;
  c.attn_free_layers = {3};
  return c;
}

Config fd_config_multi_query() {
  Config c = fd_config();
  c.num_kv_heads = 1;
  return c;
}

// Post-training's loss (TokenLossT): per-token weights of both signs with zeros (a loss mask,
// policy-gradient advantages) and a sampling temperature other than 1.
template <class Real>
struct PostTrainingLoss {
  std::vector<Real> weights;
  TokenLossT<Real> loss;
  PostTrainingLoss(int64_t T, bool on) {
    if (!on) return;
    Rng rng(31);
    weights.resize(static_cast<size_t>(T));
    for (size_t t = 0; t < weights.size(); ++t) {
      weights[t] = t % 5 == 0 ? Real(0) : static_cast<Real>(3.0 * rng.uniform() - 1.5);
    }
    loss.weights = weights;
    loss.temperature = 0.8f;
  }
  // And a head of post-training's own on the final-norm rows (PPO's value head): the loss gains
  // a random linear functional Σ_{t,i} G[t,i]·h[t,i] of the rows, whose gradient G the backward
  // takes as final_norm_grad. Zero rows among them, as at positions the head does not read.
  std::vector<Real> feature_grad;
  void add_feature_head(int64_t T, int64_t d) {
    Rng rng(41);
    feature_grad.resize(static_cast<size_t>(T * d));
    for (size_t j = 0; j < feature_grad.size(); ++j) {
      feature_grad[j] =
          (j / static_cast<size_t>(d)) % 3 == 0 ? Real(0) : static_cast<Real>(rng.uniform() - 0.5);
    }
    loss.final_norm_grad = feature_grad;
  }
  // Σ G·h over the last forward's final-norm rows (the functional whose gradient G is).
  double feature_loss(const GptT<Real>& model) const {
    double sum = 0;
    for (size_t j = 0; j < feature_grad.size(); ++j) {
      sum += static_cast<double>(feature_grad[j]) * static_cast<double>(model.final_norm()[j]);
    }
    return sum;
  }
};

void check_gradients_against_central_differences(const Config& c, bool weighted = false,
                                                 bool feature_head = false) {
  const int64_t T = 160, W = 2;  // long layers see 2 blocks, short layers 1
  auto tokens = fd_tokens(T, 7);
  std::vector<int32_t> in(tokens.begin(), tokens.end() - 1), tg(tokens.begin() + 1, tokens.end());
  GptT<double> model(c);
  randomize(model, 11);
  model.zero_grads();
  PostTrainingLoss<double> post(static_cast<int64_t>(in.size()), weighted);
  if (feature_head) post.add_feature_head(static_cast<int64_t>(in.size()), c.model_dim);
  model.forward_backward(in, tg, W, 1.0f / static_cast<float>(T), 0, nullptr, post.loss);
  const AlignedVector<double> grads = model.grads();
  auto loss = [&] {
    const double head = model.forward_loss(in, tg, W, nullptr, 0, post.loss);
    return head / static_cast<double>(T) + post.feature_loss(model);
  };

  Rng pick(5);
  int checked = 0;
  double worst = 0;
  for (const ParamTensor& t : model.params().tensors()) {
    // Three entries of every tensor; for embeddings only rows of tokens that occur.
    for (int s = 0; s < 3; ++s) {
      size_t idx = pick.next_u64() % t.numel;
      if (t.group == ParamGroup::kEmbedding) {
        const size_t d = static_cast<size_t>(t.shape.back());  // value embeddings: H_kv·D
        idx = static_cast<size_t>(in[pick.next_u64() % in.size()]) * d + idx % d;
      }
      double& p = model.params().values()[t.offset + idx];
      const double saved = p, h = 1e-5;
      p = saved + h;
      const double up = loss();
      p = saved - h;
      const double down = loss();
      p = saved;
      const double fd = (up - down) / (2 * h);
      const double g = grads[t.offset + idx];
      const double err = std::abs(fd - g) / std::max(1e-3, std::abs(g));
      worst = std::max(worst, err);
      EXPECT_LT(err, 1e-5) << t.name << "[" << idx << "]: analytic " << g << " vs numeric " << fd;
      ++checked;
    }
  }
  EXPECT_GT(checked, 80);  // 3 entries of each tensor, 29 to 49 tensors
  std::printf("finite differences (%lld key/value heads): %d entries, worst relative error %.2e\n",
              static_cast<long long>(c.num_kv_heads), checked, worst);
}

TEST(GptFiniteDifference, Float64GradientsMatchCentralDifferences) {
  check_gradients_against_central_differences(fd_config());
}

TEST(GptFiniteDifference, WeightedTemperedLossFloat64GradientsMatchCentralDifferences) {
  check_gradients_against_central_differences(fd_config(), true);
}

// TokenLossT::final_norm_grad: a head on the final-norm rows sends its gradient into the trunk
// (every tensor but lm_head, whose gradient it leaves alone), alone and with the weighted,
// tempered loss.
TEST(GptFiniteDifference, FinalNormGradientFloat64GradientsMatchCentralDifferences) {
  check_gradients_against_central_differences(fd_config(), false, true);
  check_gradients_against_central_differences(fd_config(), true, true);
}

// A final-norm gradient of the wrong size is refused before anything runs.
TEST(GptFiniteDifference, FinalNormGradientOfTheWrongSizeIsRefused) {
  const Config c = fd_config();
  auto tokens = fd_tokens(160, 7);
  std::vector<int32_t> in(tokens.begin(), tokens.end() - 1), tg(tokens.begin() + 1, tokens.end());
  GptT<double> model(c);
  randomize(model, 11);
  model.zero_grads();
  const std::vector<double> short_grad(static_cast<size_t>(c.model_dim) * (in.size() - 1), 0.5);
  TokenLossT<double> tl;
  tl.final_norm_grad = short_grad;
  EXPECT_THROW(model.forward_backward(in, tg, 2, 1.0f, 0, nullptr, tl), InputError);
  for (double g : model.grads()) ASSERT_EQ(g, 0.0);
}

TEST(GptFiniteDifference, MultiQueryFloat64GradientsMatchCentralDifferences) {
  check_gradients_against_central_differences(fd_config_multi_query());
}

// The seed's components switched off (config.hpp), one at a time and all three together: the
// backward without them is still the forward's derivative.
TEST(GptFiniteDifference, SwitchedOffComponentsFloat64GradientsMatchCentralDifferences) {
  for (const char* off : {"value_embeddings", "unet_skips", "x0_mixing", ""}) {
    Config c = fd_config();
    if (*off != '\0') {
      set_config_value(c, std::string(off) + "=false");
    } else {
      c.value_embeddings = c.unet_skips = c.x0_mixing = false;
    }
    SCOPED_TRACE(*off != '\0' ? off : "all three off");
    check_gradients_against_central_differences(c);
  }
}

// The fp32 kernels (tiled attention, fused loss, blocked GEMM) against the float64 reference
// kernels through the whole model, on identical weights: 1e-4 relative per gradient tensor.
void check_fast_path_against_float64(Config c, bool weighted = false, bool feature_head = false) {
  c.precision = PrecisionSetting::kFp32;
  const int64_t T = 160, W = 2;
  auto tokens = fd_tokens(T, 8);
  std::vector<int32_t> in(tokens.begin(), tokens.end() - 1), tg(tokens.begin() + 1, tokens.end());
  GptT<double> ref(c);
  Gpt fast(c);
  randomize(ref, 21);
  randomize(fast, 21);
  ref.zero_grads();
  fast.zero_grads();
  PostTrainingLoss<double> post64(static_cast<int64_t>(in.size()), weighted);
  PostTrainingLoss<float> post32(static_cast<int64_t>(in.size()), weighted);
  if (feature_head) {
    post64.add_feature_head(static_cast<int64_t>(in.size()), c.model_dim);
    post32.add_feature_head(static_cast<int64_t>(in.size()), c.model_dim);
  }
  const float scale = 1.0f / static_cast<float>(T);
  const double l64 = ref.forward_backward(in, tg, W, scale, 0, nullptr, post64.loss);
  const double l32 = fast.forward_backward(in, tg, W, scale, 0, nullptr, post32.loss);
  EXPECT_NEAR(l32, l64, 1e-5 * (std::abs(l64) + static_cast<double>(T)));
  for (const ParamTensor& t : ref.params().tensors()) {
    EXPECT_LT(gradient_relative_error(t, fast.grads().data(), ref.grads().data()), 1e-4) << t.name;
  }
}

TEST(GptFiniteDifference, FastFloat32PathMatchesFloat64Path) {
  check_fast_path_against_float64(fd_config());
}

TEST(GptFiniteDifference, WeightedTemperedLossFastFloat32PathMatchesFloat64Path) {
  check_fast_path_against_float64(fd_config(), true);
}

TEST(GptFiniteDifference, FinalNormGradientFastFloat32PathMatchesFloat64Path) {
  check_fast_path_against_float64(fd_config(), true, true);
}

TEST(GptFiniteDifference, SwitchedOffComponentsFastFloat32PathMatchesFloat64Path) {
  Config c = fd_config();
  c.value_embeddings = c.unet_skips = c.x0_mixing = false;
  check_fast_path_against_float64(c);
}

TEST(GptFiniteDifference, MultiQueryFastFloat32PathMatchesFloat64Path) {
  check_fast_path_against_float64(fd_config_multi_query());
}

}  // namespace
}  // namespace nanogpt
