// `nanogpt bench train` through the binary: one JSON line whose fields agree with each other
// and with the FLOP count, a profile when asked, and clear errors for bad flags. Timings are
// never asserted: the machine is shared.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "kernels/gemm/microkernel.hpp"
#include "model/gpt.hpp"
#include "runtime/file_io.hpp"
#include "support/fixtures.hpp"
#include "train/train_step.hpp"

namespace nanogpt {
namespace {

// A model small enough that two steps take well under a second.
const std::string kTiny =
    "bench train --config cpu --set vocab_size=300 --set eot_id=299 --set model_dim=32 "
    "--set num_heads=2 --set head_dim=16 --set train_seq_len=128 --set tokens_per_step=256 "
    "--set block_size=32 --set attn_free_layers=[3] --set precision=fp32 ";

Config tiny_config() {
  Config c = preset("cpu");
  for (const char* s :
       {"vocab_size=300", "eot_id=299", "model_dim=32", "num_heads=2", "head_dim=16",
        "train_seq_len=128", "tokens_per_step=256", "block_size=32", "attn_free_layers=[3]"}) {
    set_config_value(c, s);
  }
  return c;
}

TEST(BenchTrain, PrintsOneConsistentJsonLine) {
  auto r = run_nanogpt(kTiny + "--steps 2 --warmup 1");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  ASSERT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1) << r.out;
  const auto j = nlohmann::json::parse(r.out);
  for (const char* key : {"config",         "precision",     "tokens_per_step",
                          "seq_len",        "window_blocks", "steps",
                          "warmup",         "median_step_s", "tokens_per_s",
                          "flops_per_step", "tflops",        "model_flops_per_step",
                          "model_tflops",   "flops",         "loss",
                          "threads",        "isa",           "cpu",
                          "loadavg_before", "loadavg_after", "peak_rss_bytes"}) {
    EXPECT_TRUE(j.contains(key)) << key << " missing from " << r.out;
  }
  EXPECT_EQ(j["config"], "cpu");
  EXPECT_GT(j["peak_rss_bytes"].get<double>(), 0) << "getrusage failed";
  EXPECT_EQ(j["steps"], 2);
  EXPECT_EQ(j["warmup"], 1);
  EXPECT_EQ(j["tokens_per_step"], 256);
  EXPECT_EQ(j["seq_len"], 128);
  EXPECT_EQ(j["window_blocks"], 4) << "default: the whole sequence, 128 / 32";
  const double step_s = j["median_step_s"].get<double>();
  EXPECT_GT(step_s, 0);
  EXPECT_LE(j["min_step_s"].get<double>(), step_s);
  EXPECT_GE(j["max_step_s"].get<double>(), step_s);
  const double tps = j["tokens_per_s"].get<double>();
  EXPECT_NEAR(tps * step_s, 256.0, 1e-6 * 256);
  const FlopCount f = train_step_flops(tiny_config(), 4);
  EXPECT_EQ(j["flops_per_step"].get<double>(), f.total());
  EXPECT_EQ(j["model_flops_per_step"].get<double>(), f.model());
  EXPECT_NEAR(j["tflops"].get<double>() * step_s * 1e12, f.total(), 1e-6 * f.total());
  EXPECT_GT(j["tflops"].get<double>(), 0);
  EXPECT_LT(j["model_flops_per_step"].get<double>(), j["flops_per_step"].get<double>());
  EXPECT_EQ(j["flops"]["newton_schulz"].get<double>(), f.newton_schulz);
  EXPECT_TRUE(std::isfinite(j["loss"].get<double>()));
  EXPECT_GE(j["threads"].get<int>(), 1);
  EXPECT_FALSE(j["isa"].get<std::string>().empty());
  EXPECT_FALSE(j["cpu"].get<std::string>().empty());
  EXPECT_EQ(j["precision"], "fp32");
  // The micro-kernel probed before and after the steps: the kernel the products ran on, its
  // windows in order of rate.
  for (const char* key : {"kernel_rate_before", "kernel_rate_after"}) {
    ASSERT_TRUE(j.contains(key)) << key << " missing from " << r.out;
    const auto& k = j[key];
    EXPECT_EQ(k["isa"], j["isa"]) << key;
    EXPECT_GE(k["windows"].get<int>(), 3) << key;
    EXPECT_GT(k["min_gflops"].get<double>(), 0) << key;
    EXPECT_LE(k["min_gflops"].get<double>(), k["median_gflops"].get<double>()) << key;
    EXPECT_LE(k["median_gflops"].get<double>(), k["max_gflops"].get<double>()) << key;
  }
}

TEST(BenchTrain, KernelProbeCanBeSkipped) {
  auto r = run_nanogpt(kTiny + "--steps 1 --warmup 0 --kernel-probe 0");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_FALSE(j.contains("kernel_rate_before")) << r.out;
  EXPECT_FALSE(j.contains("kernel_rate_after")) << r.out;
}

// `nanogpt bench kernel`: one JSON line naming the kernel each precision runs on.
TEST(BenchKernel, PrintsTheRateOfTheKernelInUse) {
  for (const char* precision : {"bf16", "fp32"}) {
    auto r = run_nanogpt(std::string("bench kernel --seconds 0.05 --precision ") + precision);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    ASSERT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1) << r.out;
    const auto j = nlohmann::json::parse(r.out);
    EXPECT_EQ(j["bench"], "kernel");
    EXPECT_EQ(j["precision"], precision);
    const auto& k = j["kernel_rate"];
    EXPECT_EQ(k["isa"], std::string(precision) == "bf16" ? active_bf16_microkernel().isa
                                                         : active_microkernel().isa);
    EXPECT_GE(k["windows"].get<int>(), 3);
    EXPECT_GT(k["min_gflops"].get<double>(), 0);
    EXPECT_LE(k["min_gflops"].get<double>(), k["max_gflops"].get<double>());
    EXPECT_FALSE(j["cpu"].get<std::string>().empty());
  }
  for (const char* args : {"bench kernel --seconds 0", "bench kernel --precision fp16"}) {
    auto r = run_nanogpt(args);
    EXPECT_NE(r.exit_code, 0) << args;
    EXPECT_TRUE(r.out.empty()) << args << ": " << r.out;
    EXPECT_FALSE(r.err.empty()) << args;
  }
}

// The memory report: weights and gradients at 4 bytes per parameter, every part counted once
// in counted_bytes, all of it within what the OS saw resident.
TEST(BenchTrain, ReportsWhereTheMemoryGoes) {
  auto r = run_nanogpt(kTiny + "--steps 1 --warmup 1");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  ASSERT_TRUE(j.contains("memory")) << r.out;
  const auto& m = j["memory"];
  const auto parameter_bytes = Gpt(tiny_config()).params().size() * sizeof(float);
  EXPECT_EQ(m["weight_bytes"].get<size_t>(), parameter_bytes);
  EXPECT_EQ(m["gradient_bytes"].get<size_t>(), parameter_bytes);
  size_t sum = 0;
  for (const char* key :
       {"weight_bytes", "gradient_bytes", "optimizer_state_bytes", "newton_schulz_bytes",
        "activation_bytes", "packed_weight_bytes", "model_workspace_peak_bytes",
        "optimizer_workspace_peak_bytes", "process_workspace_peak_bytes"}) {
    ASSERT_TRUE(m.contains(key)) << key << " missing from " << m.dump();
    sum += m[key].get<size_t>();
  }
  for (const char* key :
       {"optimizer_state_bytes", "newton_schulz_bytes", "activation_bytes", "packed_weight_bytes",
        "model_workspace_peak_bytes", "optimizer_workspace_peak_bytes"}) {
    EXPECT_GT(m[key].get<size_t>(), 0u) << key;
  }
  EXPECT_EQ(m["counted_bytes"].get<size_t>(), sum);
  EXPECT_LT(static_cast<double>(sum), m["peak_rss_bytes"].get<double>());
}

TEST(BenchTrain, WindowAndProfile) {
  TempDir dir;
  const std::string trace = dir.path() + "/bench.json";
  auto r = run_nanogpt(kTiny + "--steps 1 --warmup 0 --window 1 --profile " + trace);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["window_blocks"], 1);
  EXPECT_EQ(j["flops_per_step"].get<double>(), train_step_flops(tiny_config(), 1).total());
  // The table goes to stderr, the trace to the file.
  EXPECT_NE(r.err.find("op type"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("train_step"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("newton_schulz"), std::string::npos) << r.err;
  const auto t = nlohmann::json::parse(read_file(trace));
  int steps = 0, adam = 0;
  for (const auto& e : t["traceEvents"]) {
    if (e["ph"] != "X") continue;
    if (e["name"] == "train_step") ++steps;
    if (e["cat"] == "adam") {
      ++adam;
      EXPECT_GT(e["args"]["flops"].get<double>(), 0);
    }
  }
  EXPECT_EQ(steps, 1) << "only the timed step is profiled";
  EXPECT_GT(adam, 0);
}

TEST(BenchTrain, BadFlagsGiveClearErrors) {
  struct Case {
    std::string args, expect;
  };
  for (const Case& c : std::vector<Case>{
           {"--steps 0", "--steps"},
           {"--warmup -1", "--warmup"},
           {"--window 5", "between 1 and 4"},
           {"--window -2", "--window: Value -2 not in range"},
           {"--set no_such_key=1", "no_such_key"},
           {"--set tokens_per_step=100", "tokens_per_step"},
           {"--precision fp16", "precision"},
           {"--profile /no/such/dir/p.json", "/no/such/dir"},
           {"--bogus", "--bogus"},
           {"--kernel-probe 0.005", "at least 0.01 seconds"},
           {"--kernel-probe -1", "--kernel-probe"},
       }) {
    auto r = run_nanogpt(kTiny + c.args);
    EXPECT_NE(r.exit_code, 0) << c.args;
    EXPECT_NE(r.err.find(c.expect), std::string::npos) << c.args << ": " << r.err;
    EXPECT_TRUE(r.out.empty()) << c.args << ": " << r.out;
  }
  auto preset = run_nanogpt("bench train --config no_such_preset");
  EXPECT_EQ(preset.exit_code, 1);
  EXPECT_NE(preset.err.find("unknown preset 'no_such_preset'"), std::string::npos) << preset.err;
}

}  // namespace
}  // namespace nanogpt
