// The switches for the seed's components (issue 15): value_embeddings, unet_skips, x0_mixing,
// window_warmup and matrix_optimizer. Each switched-off component must leave nothing behind
// (no parameters, no checkpoint tensors, no optimizer state), and the model without it must
// compute exactly what the full model computes with that component made neutral (skip weights
// 0, block lambdas (1, 0), the value embeddings' λa1 = 0): the same loss and the same gradient
// of every tensor both have, to the bit. That is the test that nothing else depends on it.
// Gradients by finite differences are in test_gpt_finite_difference.cpp, decoding in
// test_decoder.cpp.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "model/gpt.hpp"
#include "model/model_io.hpp"
#include "optim/adam.hpp"
#include "optim/gpt_optimizer.hpp"
#include "runtime/checkpoint.hpp"
#include "runtime/error.hpp"
#include "runtime/file_io.hpp"
#include "runtime/random.hpp"
#include "runtime/safetensors.hpp"
#include "support/fixtures.hpp"
#include "support/input_error.hpp"
#include "support/model.hpp"
#include "support/train_run.hpp"
#include "train/attention_window.hpp"
#include "train/trainer.hpp"

namespace nanogpt {
namespace {

bool has_name_containing(const std::vector<std::string>& names, const std::string& part) {
  for (const std::string& n : names) {
    if (n.find(part) != std::string::npos) return true;
  }
  return false;
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  size_t pos = 0;
  while (pos < text.size()) {
    const size_t end = text.find('\n', pos);
    out.push_back(text.substr(pos, end - pos));
    if (end == std::string::npos) break;
    pos = end + 1;
  }
  return out;
}

std::vector<std::string> tensor_names(const Gpt& model) {
  std::vector<std::string> out;
  for (const ParamTensor& t : model.params().tensors()) out.push_back(t.name);
  return out;
}

TEST(ComponentSwitches, DefaultsAreTheSeedsRecipeAndKeysParse) {
  for (const std::string& name : preset_names()) {
    const Config c = preset(name);
    EXPECT_EQ(c.matrix_optimizer, MatrixOptimizer::kMuon) << name;
    EXPECT_TRUE(c.value_embeddings && c.unet_skips && c.x0_mixing && c.window_warmup) << name;
  }
  const nlohmann::ordered_json j = config_to_json(preset("cpu"));
  EXPECT_EQ(j["matrix_optimizer"], "muon");  // --print-config shows every switch
  EXPECT_DOUBLE_EQ(j["adam_matrix_lr"].get<double>(), 0.003);
  for (const char* key : {"value_embeddings", "unet_skips", "x0_mixing", "window_warmup"}) {
    EXPECT_EQ(j[key], true) << key;
  }
  Config c = preset("cpu");
  set_config_value(c, "matrix_optimizer=adam");
  set_config_value(c, "adam_matrix_lr=0.01");
  set_config_value(c, "value_embeddings=false");
  set_config_value(c, "unet_skips=false");
  set_config_value(c, "x0_mixing=false");
  set_config_value(c, "window_warmup=false");
  EXPECT_EQ(c.matrix_optimizer, MatrixOptimizer::kAdam);
  EXPECT_DOUBLE_EQ(c.adam_matrix_lr, 0.01);
  EXPECT_FALSE(c.value_embeddings || c.unet_skips || c.x0_mixing || c.window_warmup);
  validate_config(c);
  const Config back = config_from_json(config_to_json(c), preset("speedrun"));
  EXPECT_EQ(config_to_json(back), config_to_json(c));
  EXPECT_EQ(config_from_json(nlohmann::json::parse(R"({"matrix_optimizer": "muon"})"), c)
                .matrix_optimizer,
            MatrixOptimizer::kMuon);

  const std::string bad = input_error([&] { set_config_value(c, "matrix_optimizer=sgd"); });
  EXPECT_NE(bad.find("matrix_optimizer"), std::string::npos) << bad;
  EXPECT_NE(bad.find("\"muon\" or \"adam\""), std::string::npos) << bad;
  EXPECT_NE(input_error([&] { set_config_value(c, "unet_skips=1"); }).find("true or false"),
            std::string::npos);
  c.adam_matrix_lr = -1;
  EXPECT_NE(input_error([&] { validate_config(c); }).find("adam_matrix_lr"), std::string::npos);
}

TEST(ComponentSwitches, SwitchedOffComponentsHaveNoParameters) {
  const Config full = micro_config();
  const std::vector<std::string> all = tensor_names(Gpt(full));
  EXPECT_TRUE(has_name_containing(all, "value_embeds."));
  EXPECT_TRUE(has_name_containing(all, "skip_weights"));
  EXPECT_TRUE(has_name_containing(all, "blocks.0.lambdas"));

  Config c = full;
  c.value_embeddings = false;
  std::vector<std::string> names = tensor_names(Gpt(c));
  EXPECT_FALSE(has_name_containing(names, "value_embeds"));
  EXPECT_TRUE(has_name_containing(names, "attn.lambdas"));  // v = λa0·v, as the middle layers
  EXPECT_EQ(names.size(), all.size() - 3);
  for (int64_t i = 0; i < c.num_layers; ++i) EXPECT_EQ(c.value_embed_index(i), -1);

  c = full;
  c.unet_skips = false;
  names = tensor_names(Gpt(c));
  EXPECT_FALSE(has_name_containing(names, "skip_weights"));
  EXPECT_EQ(names.size(), all.size() - 1);

  c = full;
  c.x0_mixing = false;
  names = tensor_names(Gpt(c));
  for (const std::string& n : names) {  // only attention's lambdas are left
    if (n.find("lambdas") != std::string::npos) {
      EXPECT_NE(n.find("attn.lambdas"), std::string::npos) << n;
    }
  }
  EXPECT_EQ(names.size(), all.size() - static_cast<size_t>(c.num_layers));
}

// The model `off` (a switch off) and the full model with that component neutral, on the same
// weights: the same loss and, for every tensor of `off`, the same gradient, exactly; except
// the entries `component_entry` names, parameters the component gives a gradient to in the full
// model (the value embeddings' λa1), which in `off` must get none.
void expect_same_as_neutral_full_model(
    const Config& off, const std::function<void(Gpt&)>& neutralise,
    const std::function<bool(const std::string&, size_t)>& component_entry = {}) {
  Config full_config = micro_config();
  full_config.precision = PrecisionSetting::kFp32;
  Config off_config = off;
  off_config.precision = PrecisionSetting::kFp32;
  Gpt model(off_config), full(full_config);
  randomize(model, 31);
  randomize(full, 32);
  for (const ParamTensor& t : model.params().tensors()) {
    std::memcpy(full.params().data(t.name), model.params().data(t.name), t.numel * sizeof(float));
  }
  neutralise(full);
  const auto tokens = synthetic_tokens(257, 12);
  const std::vector<int32_t> in(tokens.begin(), tokens.end() - 1),
      tg(tokens.begin() + 1, tokens.end());
  model.zero_grads();
  full.zero_grads();
  // Two 128-token sequences, a window of one block: documents, mask and skips all active.
  const double loss = model.forward_backward(in, tg, 1, 1.0f / 256, 128);
  const double full_loss = full.forward_backward(in, tg, 1, 1.0f / 256, 128);
  EXPECT_EQ(loss, full_loss);
  for (const ParamTensor& t : model.params().tensors()) {
    const float* g = model.grads().data() + t.offset;
    const float* fg = full.grads().data() + full.params().info(t.name).offset;
    size_t differing = 0;
    for (size_t k = 0; k < t.numel; ++k) {
      if (component_entry && component_entry(t.name, k)) {
        EXPECT_EQ(g[k], 0.0f) << t.name << "[" << k << "]";
        EXPECT_NE(fg[k], 0.0f) << t.name << "[" << k << "]: the component should have mattered";
        continue;
      }
      differing += g[k] != fg[k] ? 1 : 0;
    }
    EXPECT_EQ(differing, 0u) << t.name;
  }
}

TEST(ComponentSwitches, WithoutSkipsTheModelIsTheFullOneWithZeroSkipWeights) {
  Config c = micro_config();
  c.unet_skips = false;
  expect_same_as_neutral_full_model(c, [](Gpt& full) {
    const ParamTensor& t = full.params().info("skip_weights");
    std::fill_n(full.params().data(t.name), t.numel, 0.0f);
  });
}

TEST(ComponentSwitches, WithoutX0MixingTheModelIsTheFullOneWithLambdasOneZero) {
  Config c = micro_config();
  c.x0_mixing = false;
  expect_same_as_neutral_full_model(c, [](Gpt& full) {
    for (int64_t i = 0; i < full.config().num_layers; ++i) {
      float* l = full.params().data("blocks." + std::to_string(i) + ".lambdas");
      l[0] = 1;
      l[1] = 0;
    }
  });
}

TEST(ComponentSwitches, WithoutValueEmbeddingsTheModelIsTheFullOneNotMixingThem) {
  Config c = micro_config();
  c.value_embeddings = false;
  expect_same_as_neutral_full_model(
      c,
      [](Gpt& full) {
        for (int64_t i = 0; i < full.config().num_layers; ++i) {
          if (full.config().value_embed_index(i) >= 0 && full.config().has_attention(i))
            full.params().data("blocks." + std::to_string(i) + ".attn.lambdas")[1] = 0;
        }
      },
      // λa1's gradient, Σ dv·ve, is the value embedding's in the full model.
      [&](const std::string& name, size_t k) {
        for (int64_t i = 0; i < c.num_layers; ++i) {
          if (name == "blocks." + std::to_string(i) + ".attn.lambdas" && k == 1)
            return micro_config().value_embed_index(i) >= 0;
        }
        return false;
      });
}

TEST(ComponentSwitches, WithoutWindowWarmupEveryStepHasTheLastWindow) {
  Config c = preset("cpu");
  c.num_iterations = 100;
  c.train_seq_len = 2048;
  c.tokens_per_step = 2048;
  c.max_window_tokens = 1000;  // 8 blocks
  EXPECT_EQ(attention_window_at(c, 0), 1);
  EXPECT_EQ(attention_window_at(c, 100), 8);
  c.window_warmup = false;
  for (int64_t step : {0, 1, 50, 100}) EXPECT_EQ(attention_window_at(c, step), 8) << step;
  c.max_window_tokens = 100000;  // clamped to a training sequence, as with the warm-up
  EXPECT_EQ(attention_window_at(c, 0), 16);
}

// Adam on the matrices: each matrix is one more Adam tensor, updated exactly as adam_update
// updates it at adam_matrix_lr; Muon keeps no state.
TEST(ComponentSwitches, AdamMatricesAreAdamTensorsAtTheirOwnRate) {
  Config c = micro_config();
  c.matrix_optimizer = MatrixOptimizer::kAdam;
  c.adam_matrix_lr = 0.007;
  Gpt model(c);
  model.init_parameters(3);
  ParameterSet params = model.params();
  GptOptimizer opt(params, c, Precision::kFp32);
  EXPECT_EQ(muon_newton_schulz_flops(c), 0.0);
  Rng rng(8);
  std::vector<float> grads(params.size());
  for (float& g : grads) g = static_cast<float>(0.01 * rng.normal());
  const ParamTensor& t = params.info("blocks.1.mlp.c_fc.weight");
  ASSERT_EQ(t.group, ParamGroup::kMatrix);
  std::vector<float> expected(params.data(t.name), params.data(t.name) + t.numel);
  std::vector<float> m(t.numel, 0.0f), v(t.numel, 0.0f);
  AdamConfig adam;
  adam.beta1 = c.adam_beta1;
  adam.beta2 = c.adam_beta2;
  adam.eps = c.adam_eps;
  adam_update(expected.data(), grads.data() + t.offset, m.data(), v.data(),
              static_cast<int64_t>(t.numel), c.adam_matrix_lr, adam, 1);  // multiplier 1 at step 0
  opt.step(params, grads, 0);
  EXPECT_EQ(std::memcmp(expected.data(), params.data(t.name), t.numel * sizeof(float)), 0);

  std::vector<std::string> state;
  for (const auto& s : opt.state_layout()) state.push_back(s.name);
  EXPECT_FALSE(has_name_containing(state, "muon_buffer/"));
  EXPECT_TRUE(has_name_containing(state, "adam_exp_avg/blocks.1.mlp.c_fc.weight"));
  EXPECT_TRUE(has_name_containing(state, "adam_exp_avg_sq/blocks.0.attn.qkv_w"));
  // 8 bytes of moments per parameter, none of Muon's 4.
  EXPECT_EQ(opt.state_bytes(), 8 * params.size());
}

TrainOptions switched_off_run(const TempDir& data, const std::string& run) {
  TrainOptions o = micro_train_options(data.path(), run);
  o.config.matrix_optimizer = MatrixOptimizer::kAdam;
  o.config.value_embeddings = false;
  o.config.unet_skips = false;
  o.config.x0_mixing = false;
  o.config.window_warmup = false;
  o.config.train_seq_len = 256;  // room for a window of 2 blocks, so the warm-up would show
  return o;
}

TEST(ComponentSwitches, EverythingOffTrainsCheckpointsWithoutThemAndResumesBitwise) {
  TempDir data;
  write_synthetic_shards(data.path());
  TrainOptions full = switched_off_run(data, data.path() + "/full");
  train(full);
  TrainOptions part = switched_off_run(data, data.path() + "/part");
  part.max_steps = 3;
  EXPECT_EQ(train(part).final_step, 3);
  part.max_steps = 0;
  part.resume = true;
  EXPECT_EQ(train(part).final_step, 6);
  // Every line of metrics.jsonl but the timings, exactly.
  auto losses = [](const std::string& run) {
    std::vector<double> out;
    for (const std::string& line : lines_of(read_file(run + "/metrics.jsonl"))) {
      const auto j = nlohmann::json::parse(line);
      out.push_back(j.at("loss").get<double>());
      out.push_back(j.value("val_loss", -1.0));
      EXPECT_EQ(j.at("window_blocks"), 2) << "no warm-up: the whole window from step 1";
    }
    return out;
  };
  EXPECT_EQ(losses(full.run_dir), losses(part.run_dir));
  EXPECT_EQ(losses(full.run_dir).size(), 12u);

  const std::string ckpt = find_latest_checkpoint(full.run_dir);
  const std::vector<std::string> weights = SafetensorsReader(ckpt + "/model.safetensors").names();
  const std::vector<std::string> state = SafetensorsReader(ckpt + "/optimizer.safetensors").names();
  for (const char* gone : {"value_embeds", "skip_weights", "blocks.0.lambdas", "muon_buffer"}) {
    EXPECT_FALSE(has_name_containing(weights, gone)) << gone;
    EXPECT_FALSE(has_name_containing(state, gone)) << gone;
  }
  EXPECT_TRUE(has_name_containing(state, "adam_exp_avg/blocks.0.mlp.c_fc.weight"));
  // The checkpoint rebuilds the model it holds, switches included.
  const auto model = load_model(ckpt);
  EXPECT_EQ(config_to_json(model->config()), config_to_json(full.config));
  // Into the full model it does not load: it lacks the full model's tensors.
  Gpt with_everything(micro_config());
  EXPECT_NE(input_error([&] { load_model_weights(with_everything, ckpt); }).find("lacks tensor"),
            std::string::npos);
}

}  // namespace
}  // namespace nanogpt
