// The model against golden data from an independent PyTorch implementation
// (tools/golden/make_model_golden.py: float64 forward/backward of the same float32 weights,
// random non-zero initialisation so every path carries signal).
// Bounds, relative (‖a−b‖/‖b‖ for tensors), against float64:
//   fp32: mean loss 1e-5, activations 1e-5, every gradient tensor 1e-4.
//   bf16 (operands of every product rounded to 8 significant bits, 2⁻⁹ relative each, fp32
//   accumulation): mean loss 1e-3, activations 1e-2, every gradient tensor 3e-2.
#include <gtest/gtest.h>

#include <cmath>

#include "model/gpt.hpp"
#include "runtime/safetensors.hpp"
#include "test_support.hpp"

namespace nanogpt {
namespace {

double relative_error(const float* a, const std::vector<float>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < b.size(); ++i) {
    double d = static_cast<double>(a[i]) - b[i];
    num += d * d;
    den += static_cast<double>(b[i]) * b[i];
  }
  return std::sqrt(num) / std::max(std::sqrt(den), 1e-30);
}

struct Golden {
  SafetensorsReader file{source_path("tests/data/golden_model_small.safetensors")};
  Config config;
  int64_t window = 0;
  std::vector<int32_t> inputs, targets;
  Golden() {
    auto j = nlohmann::json::parse(file.metadata_value("config"));
    config = preset("cpu");
    config.vocab_size = j.at("vocab_size");
    config.num_layers = j.at("num_layers");
    config.num_heads = j.at("num_heads");
    config.head_dim = j.at("head_dim");
    config.model_dim = j.at("model_dim");
    config.attn_free_layers = j.at("attn_free_layers").get<std::vector<int64_t>>();
    config.eot_id = j.at("eot_id");
    config.fp8_head = false;
    window = j.at("window_blocks");
    auto tokens = file.read_i32("tokens");
    inputs.assign(tokens.begin(), tokens.end() - 1);
    targets.assign(tokens.begin() + 1, tokens.end());
  }
  void load_params(Gpt& model) {
    for (const ParamTensor& t : model.params().tensors()) {
      auto v = file.read_f32("param/" + t.name, t.shape);
      std::copy(v.begin(), v.end(), model.params().values().begin() + static_cast<long>(t.offset));
    }
  }
};

struct Bounds {
  double loss, activations, gradients;
};

void check_against_pytorch(const char* precision, Bounds bounds) {
  Golden g;
  set_config_value(g.config, std::string("precision=") + precision);
  Gpt model(g.config);
  g.load_params(model);
  model.zero_grads();
  const int64_t T = static_cast<int64_t>(g.inputs.size());
  const double loss =
      model.forward_backward(g.inputs, g.targets, g.window, 1.0f / static_cast<float>(T)) /
      static_cast<double>(T);
  const double want = g.file.read_f64("loss")[0];
  EXPECT_NEAR(loss, want, bounds.loss * std::abs(want)) << "mean loss";

  EXPECT_LT(relative_error(model.x0().data(), g.file.read_f32("act/x0")), bounds.activations);
  for (int64_t i = 0; i < g.config.num_layers; ++i) {
    EXPECT_LT(relative_error(model.block_output(i).data(),
                             g.file.read_f32("act/block_out." + std::to_string(i))),
              bounds.activations)
        << "block " << i;
  }
  EXPECT_LT(relative_error(model.final_norm().data(), g.file.read_f32("act/final_norm")),
            bounds.activations);

  size_t checked = 0;
  double worst = 0;
  for (const ParamTensor& t : model.params().tensors()) {
    auto want_grad = g.file.read_f32("grad/" + t.name, t.shape);
    double err = relative_error(model.grads().data() + t.offset, want_grad);
    EXPECT_LT(err, bounds.gradients) << "gradient of " << t.name;
    worst = std::max(worst, err);
    ++checked;
  }
  std::printf(
      "golden parity (%s): mean loss %.9f vs %.9f (relative %.1e); worst gradient error %.1e over "
      "%zu tensors\n",
      precision, loss, want, std::abs(loss - want) / want, worst, checked);
  EXPECT_EQ(checked, g.file.names().size() > 0 ? model.params().tensors().size() : 0u);
  EXPECT_GT(checked, 40u);
}

TEST(GptGolden, Fp32MatchesPyTorch) {
  check_against_pytorch("fp32", {1e-5, 1e-5, 1e-4});
}

TEST(GptGolden, Bf16MatchesPyTorchWithinBf16Bounds) {
  check_against_pytorch("bf16", {1e-3, 1e-2, 3e-2});
}

TEST(GptGolden, ForwardLossEqualsForwardBackwardLoss) {
  Golden g;
  Gpt model(g.config);
  g.load_params(model);
  std::vector<float> per_token(g.inputs.size());
  double a = model.forward_loss(g.inputs, g.targets, g.window, per_token.data());
  model.zero_grads();
  double b = model.forward_backward(g.inputs, g.targets, g.window, 1.0f);
  EXPECT_DOUBLE_EQ(a, b);
  double sum = 0;
  for (float x : per_token) sum += x;
  EXPECT_NEAR(sum, a, 1e-4 * a);
}

TEST(GptGolden, GradientsAccumulateAcrossCalls) {
  Golden g;
  Gpt model(g.config);
  g.load_params(model);
  model.zero_grads();
  model.forward_backward(g.inputs, g.targets, g.window, 0.5f);
  const AlignedVector<float> once = model.grads();
  model.forward_backward(g.inputs, g.targets, g.window, 0.5f);
  for (size_t i = 0; i < once.size(); i += 97)
    EXPECT_NEAR(model.grads()[i], 2 * once[i], 1e-6 + 1e-5 * std::abs(once[i]));
}

}  // namespace
}  // namespace nanogpt
