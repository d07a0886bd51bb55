// Incremental decoding must give the logits of a full recompute: within 1e-5 in fp32. In bf16
// the two paths sum in different orders, so an activation can land on the other side of a bf16
// rounding boundary before the next product (2⁻⁹ relative); the bound is 2e-3 absolute on
// logits of magnitude ≤ 30.
#include <gtest/gtest.h>

#include <cmath>

#include "kernels/fused_linear_cross_entropy.hpp"
#include "model/decoder.hpp"
#include "runtime/random.hpp"
#include "test_support_model.hpp"

namespace nanogpt {
namespace {

void check_kv_cache_against_full_recompute(const char* precision, double bound) {
  Config c = micro_config();
  set_config_value(c, std::string("precision=") + precision);
  Gpt model(c);
  model.init_parameters(3);
  // The real initialisation zeroes the projections and the head; perturb everything so every
  // path carries signal.
  Rng rng(4);
  for (float& p : model.params().values()) p += static_cast<float>(0.05 * rng.normal());
  const int64_t T = 300, W = 1;  // several 128-token blocks with a one-block window
  auto tokens = synthetic_tokens(T, 9);
  std::vector<int32_t> inputs(tokens.begin(), tokens.end()), targets(T, 0);
  model.forward_loss(inputs, targets, W);
  const int64_t Vp = c.vocab_padded();
  std::vector<float> full(static_cast<size_t>(T * Vp));
  FusedLossParams p;
  p.T = T;
  p.d = c.model_dim;
  p.V = Vp;
  p.x = model.final_norm().data();
  p.W = model.params().data("lm_head.weight");
  p.softcap = static_cast<float>(c.logit_softcap);
  p.softcap_divisor = static_cast<float>(7.5 * std::sqrt(double(c.model_dim)));
  p.precision = model.precision();
  capped_logits(p, full.data());

  GptDecoder decoder(model, T, W);
  double worst = 0;
  for (int64_t t = 0; t < T; ++t) {
    const std::vector<float>& z = decoder.step(inputs[t]);
    for (int64_t v = 0; v < Vp; ++v)
      worst = std::max(worst, double(std::abs(z[v] - full[t * Vp + v])));
  }
  std::printf("kv cache (%s): worst logit difference %.2e\n", precision, worst);
  EXPECT_LT(worst, bound);
  EXPECT_THROW(decoder.step(1), std::exception);  // context full
}

TEST(GptDecoder, KvCacheLogitsEqualFullRecomputeFp32) {
  check_kv_cache_against_full_recompute("fp32", 1e-5);
}

TEST(GptDecoder, KvCacheLogitsEqualFullRecomputeBf16) {
  check_kv_cache_against_full_recompute("bf16", 2e-3);
}

}  // namespace
}  // namespace nanogpt
