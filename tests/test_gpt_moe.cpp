// The mixture-of-experts MLP (num_experts, experts_per_token, moe_layers): configuration and
// its errors, the checkpoint names PyTorch loads, float64 finite differences of the whole
// objective (language loss + moe_aux_loss_coef · load balancing), the fp32 grouped-GEMM path
// against the float64 references, bitwise thread invariance, Muon's per-expert matrices and the
// router's Adam group.
//
// Finite differences meet the routing's kinks: top-k is piecewise constant in the weights. A
// step h = 1e-5 moves a router logit by about 1e-5, while on these inputs the top-k choices of
// every token are separated by far more; the test re-checks each perturbed forward's routing
// against the base point's and fails (naming the entry) if a step ever crossed a kink.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "model/gpt.hpp"
#include "model/model_io.hpp"
#include "optim/gpt_optimizer.hpp"
#include "optim/muon.hpp"
#include "optim/schedule.hpp"
#include "runtime/checkpoint.hpp"
#include "runtime/file_io.hpp"
#include "runtime/random.hpp"
#include "runtime/thread_pool.hpp"
#include "support/fixtures.hpp"
#include "support/model.hpp"
#include "train/trainer.hpp"

namespace nanogpt {
namespace {

// 4 experts of width 24 (not 4·d), top-2, in a block with attention (1) and in the
// attention-free block (3).
Config moe_config() {
  Config c = micro_config();
  c.num_experts = 4;
  c.experts_per_token = 2;
  c.moe_layers = {1, 3};
  c.moe_hidden_dim = 24;
  return c;
}

Config fd_moe_config() {
  Config c = moe_config();
  c.vocab_size = 100;  // padded to 128
  c.eot_id = 99;
  c.head_dim = 8;
  c.model_dim = 16;
  c.moe_aux_loss_coef = 0.5;  // large, so the balancing gradient is a visible part of the router's
  return c;
}

std::string error_of(const Config& c) {
  try {
    validate_config(c);
  } catch (const InputError& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected an InputError";
  return "";
}

TEST(GptMoe, ConfigKeysDefaultsAndErrors) {
  Config c = preset("cpu");
  EXPECT_EQ(c.num_experts, 0);
  EXPECT_TRUE(c.moe_layers.empty());
  EXPECT_FALSE(c.is_moe_layer(1));
  set_config_value(c, "num_experts=8");
  set_config_value(c, "experts_per_token=2");
  set_config_value(c, "moe_layers=[1,3]");
  set_config_value(c, "moe_hidden_dim=384");
  set_config_value(c, "moe_aux_loss_coef=0.02");
  validate_config(c);
  EXPECT_TRUE(c.is_moe_layer(1));
  EXPECT_FALSE(c.is_moe_layer(2));
  EXPECT_EQ(c.moe_hidden(), 384);
  c.moe_hidden_dim = 0;
  EXPECT_EQ(c.moe_hidden(), 4 * c.model_dim);
  EXPECT_EQ(config_to_json(config_from_json(config_to_json(c), preset("speedrun"))),
            config_to_json(c));

  Config bad = c;
  bad.experts_per_token = 9;
  EXPECT_NE(error_of(bad).find("experts_per_token must be in [1, num_experts = 8]"),
            std::string::npos);
  bad.experts_per_token = 0;
  EXPECT_NE(error_of(bad).find("experts_per_token"), std::string::npos);
  bad = c;
  bad.moe_layers = {};
  EXPECT_NE(error_of(bad).find("moe_layers names no layer"), std::string::npos);
  bad.moe_layers = {6};
  EXPECT_NE(error_of(bad).find("entry 6 is not a layer index"), std::string::npos);
  bad = c;
  bad.num_experts = 0;
  EXPECT_NE(error_of(bad).find("moe_layers needs num_experts >= 1"), std::string::npos);
  bad.num_experts = -1;
  EXPECT_NE(error_of(bad).find("num_experts must be >= 0"), std::string::npos);
  bad = c;
  bad.moe_hidden_dim = -4;
  EXPECT_NE(error_of(bad).find("moe_hidden_dim"), std::string::npos);
  bad = c;
  bad.moe_aux_loss_coef = -0.1;
  EXPECT_NE(error_of(bad).find("moe_aux_loss_coef must be >= 0"), std::string::npos);
  EXPECT_THROW(Gpt{bad}, InputError);
}

TEST(GptMoe, TensorsAreNamedAndShapedForPyTorch) {
  const Config c = moe_config();
  Gpt model(c);
  const ParameterSet& P = model.params();
  const int64_t d = c.model_dim;
  EXPECT_FALSE(P.contains("blocks.1.mlp.c_fc.weight"));
  EXPECT_TRUE(P.contains("blocks.0.mlp.c_fc.weight"));  // dense blocks stay as they were
  EXPECT_EQ(P.info("blocks.1.mlp.router.weight").shape, (std::vector<int64_t>{4, d}));
  EXPECT_EQ(P.info("blocks.1.mlp.router.weight").group, ParamGroup::kRouter);
  EXPECT_EQ(P.info("blocks.3.mlp.experts.c_fc.weight").shape, (std::vector<int64_t>{4, 24, d}));
  EXPECT_EQ(P.info("blocks.3.mlp.experts.c_proj.weight").shape, (std::vector<int64_t>{4, d, 24}));
  EXPECT_EQ(P.info("blocks.3.mlp.experts.c_fc.weight").group, ParamGroup::kMatrix);
  // Roles as the dense MLP's: c_proj zero, c_fc (and the router) uniform within the fan-in bound.
  model.init_parameters(1);
  const float bound = static_cast<float>(std::sqrt(3.0) * 0.5 / std::sqrt(double(d)));
  for (const char* name : {"blocks.1.mlp.router.weight", "blocks.1.mlp.experts.c_fc.weight"}) {
    const ParamTensor& t = P.info(name);
    float largest = 0;
    for (size_t i = 0; i < t.numel; ++i)
      largest = std::max(largest, std::abs(P.values()[t.offset + i]));
    EXPECT_LE(largest, bound) << name;
    EXPECT_GT(largest, 0.5f * bound) << name;
  }
  const ParamTensor& proj = P.info("blocks.1.mlp.experts.c_proj.weight");
  for (size_t i = 0; i < proj.numel; ++i) ASSERT_EQ(P.values()[proj.offset + i], 0.0f);
}

TEST(GptMoe, Float64GradientsMatchCentralDifferences) {
  const Config c = fd_moe_config();
  const int64_t T = 160, W = 2;
  auto tokens = fd_tokens(T, 7);
  std::vector<int32_t> in(tokens.begin(), tokens.end() - 1), tg(tokens.begin() + 1, tokens.end());
  GptT<double> model(c);
  randomize(model, 11);
  model.zero_grads();
  model.forward_backward(in, tg, W, 1.0f / static_cast<float>(T));
  const AlignedVector<double> grads = model.grads();
  const std::vector<int32_t> routing1 = model.moe_expert_ids(1), routing3 = model.moe_expert_ids(3);
  EXPECT_GT(model.moe_aux_loss(), 0.0);
  // The objective the backward differentiates: mean language loss + coef · Σ blocks' aux.
  auto objective = [&] {
    const double lm = model.forward_loss(in, tg, W) / static_cast<double>(T);
    return lm + c.moe_aux_loss_coef * model.moe_aux_loss();
  };

  Rng pick(5);
  int checked = 0;
  double worst = 0;
  for (const ParamTensor& t : model.params().tensors()) {
    const bool moe = t.name.find("mlp.router") != std::string::npos ||
                     t.name.find("mlp.experts") != std::string::npos;
    for (int s = 0; s < (moe ? 8 : 2); ++s) {
      size_t idx = pick.next_u64() % t.numel;
      if (t.group == ParamGroup::kEmbedding) {
        const size_t d = static_cast<size_t>(t.shape.back());
        idx = static_cast<size_t>(in[pick.next_u64() % in.size()]) * d + idx % d;
      }
      double& p = model.params().values()[t.offset + idx];
      const double saved = p, h = 1e-5;
      p = saved + h;
      const double up = objective();
      const bool same_up =
          model.moe_expert_ids(1) == routing1 && model.moe_expert_ids(3) == routing3;
      p = saved - h;
      const double down = objective();
      const bool same_down =
          model.moe_expert_ids(1) == routing1 && model.moe_expert_ids(3) == routing3;
      p = saved;
      ASSERT_TRUE(same_up && same_down)
          << t.name << "[" << idx << "]: a step crossed a routing kink";
      const double fd = (up - down) / (2 * h);
      const double g = grads[t.offset + idx];
      const double err = std::abs(fd - g) / std::max(1e-3, std::abs(g));
      worst = std::max(worst, err);
      EXPECT_LT(err, 1e-5) << t.name << "[" << idx << "]: analytic " << g << " vs numeric " << fd;
      ++checked;
    }
  }
  EXPECT_GT(checked, 100);
  std::printf("MoE finite differences: %d entries, worst relative error %.2e\n", checked, worst);
}

// Where the load-balancing loss reaches: the routers, and what lies below them through their
// inputs; never the last MoE block's experts, the blocks above it or the head (the loss does
// not depend on them). Its coefficient leaves the forward (and the returned loss) unchanged.
TEST(GptMoe, AuxLossGradientReachesOnlyWhatFeedsTheRouters) {
  Config a = fd_moe_config(), b = a;
  b.moe_aux_loss_coef = 0;
  const int64_t T = 160;
  auto tokens = fd_tokens(T, 3);
  std::vector<int32_t> in(tokens.begin(), tokens.end() - 1), tg(tokens.begin() + 1, tokens.end());
  GptT<double> ma(a), mb(b);
  randomize(ma, 4);
  randomize(mb, 4);
  ma.zero_grads();
  mb.zero_grads();
  EXPECT_EQ(ma.forward_backward(in, tg, 2, 1.0f), mb.forward_backward(in, tg, 2, 1.0f));
  for (const ParamTensor& t : ma.params().tensors()) {
    double diff = 0;
    for (size_t i = 0; i < t.numel; ++i)
      diff = std::max(diff, std::abs(ma.grads()[t.offset + i] - mb.grads()[t.offset + i]));
    const bool feeds_a_router = t.name.find("router") != std::string::npos;
    const bool above_the_routers =
        t.name.rfind("blocks.3.mlp.experts", 0) == 0 || t.name == "lm_head.weight" ||
        t.name.rfind("blocks.4.", 0) == 0 || t.name.rfind("blocks.5.", 0) == 0;
    if (feeds_a_router) {
      EXPECT_GT(diff, 1e-6) << t.name;
    }
    if (above_the_routers) {
      EXPECT_EQ(diff, 0.0) << t.name;
    }
  }
}

TEST(GptMoe, FastFloat32PathMatchesFloat64Path) {
  Config c = fd_moe_config();
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
  const double l64 = ref.forward_backward(in, tg, W, 1.0f / static_cast<float>(T));
  const double l32 = fast.forward_backward(in, tg, W, 1.0f / static_cast<float>(T));
  ASSERT_EQ(ref.moe_expert_ids(1), fast.moe_expert_ids(1));
  ASSERT_EQ(ref.moe_expert_ids(3), fast.moe_expert_ids(3));
  EXPECT_NEAR(l32, l64, 1e-5 * std::abs(l64));
  EXPECT_NEAR(fast.moe_aux_loss(), ref.moe_aux_loss(), 1e-5 * ref.moe_aux_loss());
  double worst = 0;
  for (const ParamTensor& t : ref.params().tensors()) {
    const double err = gradient_relative_error(t, fast.grads().data(), ref.grads().data());
    worst = std::max(worst, err);
    EXPECT_LT(err, 1e-4) << t.name;
  }
  std::printf("MoE fp32 against float64: worst gradient error %.2e\n", worst);
}

TEST(GptMoe, TrainingStepIsBitwiseIdenticalForAnyThreadCount) {
  for (const char* precision : {"fp32", "bf16"}) {
    SCOPED_TRACE(precision);
    Config c = moe_config();
    set_config_value(c, std::string("precision=") + precision);
    const StepResult one = run_step(c, 1);
    EXPECT_TRUE(std::isfinite(one.loss));
    for (int threads : {2, 3}) {
      const StepResult other = run_step(c, threads);
      EXPECT_EQ(std::memcmp(&one.loss, &other.loss, sizeof(double)), 0) << threads << " threads";
      ASSERT_EQ(one.grads.size(), other.grads.size());
      EXPECT_EQ(std::memcmp(one.grads.data(), other.grads.data(), one.grads.size() * sizeof(float)),
                0)
          << threads << " threads: gradients differ from 1 thread";
    }
  }
}

// Muon orthogonalises each expert's c_fc and c_proj on its own: one optimizer step on the
// stacked [E, R, C] tensor equals muon_update on each expert's [R, C] slice alone, bit for bit;
// the router is updated by Adam (it has moments, no Muon buffer).
TEST(GptMoe, MuonUpdatesEachExpertsMatrixOnItsOwn) {
  ThreadPool pool(1);
  ThreadPool::Use use(pool);
  Config c = moe_config();
  c.precision = PrecisionSetting::kFp32;
  Gpt model(c);
  randomize(model, 2);
  ParameterSet params = model.params();
  std::vector<float> grads(params.size());
  Rng rng(9);
  for (float& g : grads) g = static_cast<float>(0.01 * rng.normal());
  const ParameterSet before = params;
  GptOptimizer opt(params, c, model.precision());
  opt.step(params, grads, 0);

  MuonConfig mc;
  mc.momentum_start = c.muon_momentum_start;
  mc.momentum_end = c.muon_momentum_end;
  mc.momentum_warmup_steps = c.muon_momentum_warmup;
  const double lr = c.muon_lr * lr_multiplier(0, c.num_iterations, c.cooldown_frac);
  for (const char* name :
       {"blocks.1.mlp.experts.c_fc.weight", "blocks.3.mlp.experts.c_proj.weight"}) {
    const ParamTensor& t = params.info(name);
    const int64_t R = t.shape[1], C = t.shape[2];
    for (int64_t e = 0; e < c.num_experts; ++e) {
      const size_t off = t.offset + static_cast<size_t>(e * R * C);
      std::vector<float> p(before.values().begin() + static_cast<long>(off),
                           before.values().begin() + static_cast<long>(off + R * C));
      std::vector<float> buf(static_cast<size_t>(R * C), 0.0f);
      NewtonSchulzWorkspace ws;
      ws.precision = Precision::kFp32;
      ws.staging.resize(static_cast<size_t>(R * C));
      muon_update(p.data(), grads.data() + off, buf.data(), R, C, lr, muon_momentum(0, mc),
                  static_cast<int>(c.muon_ns_steps), ws);
      EXPECT_EQ(std::memcmp(p.data(), params.values().data() + off, p.size() * sizeof(float)), 0)
          << name << " expert " << e;
    }
  }
  bool router_has_adam = false, router_has_muon = false;
  for (const auto& s : opt.state_layout()) {
    router_has_adam |= s.name == "adam_exp_avg/blocks.1.mlp.router.weight";
    router_has_muon |= s.name == "muon_buffer/blocks.1.mlp.router.weight";
  }
  EXPECT_TRUE(router_has_adam);
  EXPECT_FALSE(router_has_muon);
}

// `nanogpt train` with MoE blocks: the language loss falls, every metrics line carries the
// balancing loss, and the checkpoint reloads as the same MoE model.
TEST(GptMoe, TrainsLogsItsBalanceAndReloads) {
  TempDir data;
  write_synthetic_shards(data.path());
  TrainOptions o;
  o.config = moe_config();
  o.config.num_iterations = 20;
  o.config.val_loss_every = 10;
  o.train_pattern = data.path() + "/train_*.bin";
  o.val_pattern = data.path() + "/val_*.bin";
  o.run_dir = data.path() + "/run";
  o.live_line = false;
  const TrainResult r = train(o);
  EXPECT_EQ(r.final_step, 20);
  std::vector<double> val;
  const std::string text = read_file(o.run_dir + "/metrics.jsonl");
  for (size_t pos = 0; pos < text.size();) {
    const size_t end = text.find('\n', pos);
    const auto j = nlohmann::json::parse(text.substr(pos, end - pos));
    ASSERT_TRUE(j.contains("moe_aux_loss")) << j.dump();
    EXPECT_GT(j["moe_aux_loss"].get<double>(), 0.0);
    if (j.contains("val_loss")) val.push_back(j["val_loss"].get<double>());
    pos = end + 1;
  }
  ASSERT_EQ(val.size(), 2u);
  // The zero-initialised head starts uniform over the padded vocabulary.
  const double start = std::log(static_cast<double>(o.config.vocab_padded()));
  EXPECT_LT(r.final_val_loss, start - 1.0) << "validation loss should fall";
  auto model = load_model(find_latest_checkpoint(o.run_dir));
  EXPECT_EQ(model->config().moe_layers, o.config.moe_layers);
  EXPECT_TRUE(model->params().contains("blocks.3.mlp.experts.c_proj.weight"));
}

}  // namespace
}  // namespace nanogpt
