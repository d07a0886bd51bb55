#include <gtest/gtest.h>

#include "config/config.hpp"
#include "kernels/gemm/isa.hpp"
#include "kernels/gemm/microkernel.hpp"
#include "runtime/cpu_info.hpp"
#include "runtime/error.hpp"
#include "runtime/file_io.hpp"
#include "support/fixtures.hpp"
#include "support/input_error.hpp"

namespace nanogpt {
namespace {

TEST(Config, SpeedrunPresetIsTheSeedsRecord) {
  Config c = preset("speedrun");
  EXPECT_EQ(c.vocab_size, 50261);      // GPT-2's 50257 and the four chat tokens
  EXPECT_EQ(c.vocab_padded(), 50304);  // the seed's head, as with 50257
  EXPECT_EQ(c.num_layers, 12);
  EXPECT_EQ(c.num_heads, 6);
  EXPECT_EQ(c.head_dim, 128);
  EXPECT_EQ(c.model_dim, 768);
  EXPECT_EQ(c.train_seq_len, 48 * 1024);
  EXPECT_EQ(c.num_iterations, 1770);
  EXPECT_TRUE(c.fp8_head);
  EXPECT_FALSE(c.has_attention(7));
  // long, short, short, short, long, short, short, long, short, short, short, long
  std::string pattern;
  for (int i = 0; i < 12; ++i) pattern += c.is_long_window(i) ? 'L' : 's';
  EXPECT_EQ(pattern, "LsssLssLsssL");
  EXPECT_EQ(c.value_embed_index(0), 0);
  EXPECT_EQ(c.value_embed_index(2), 2);
  EXPECT_EQ(c.value_embed_index(5), -1);
  EXPECT_EQ(c.value_embed_index(9), 0);
  EXPECT_EQ(c.value_embed_index(11), 2);
  validate_config(c);
  validate_config(preset("cpu"));
}

TEST(Config, SetOverridesAndRoundTripsThroughJson) {
  Config c = preset("cpu");
  set_config_value(c, "num_layers=8");
  set_config_value(c, "cooldown_frac=0.25");
  set_config_value(c, "fp8_head=true");
  set_config_value(c, "attn_free_layers=[3,5]");
  EXPECT_EQ(c.num_layers, 8);
  EXPECT_DOUBLE_EQ(c.cooldown_frac, 0.25);
  EXPECT_TRUE(c.fp8_head);
  EXPECT_EQ(c.attn_free_layers, (std::vector<int64_t>{3, 5}));
  Config back = config_from_json(config_to_json(c), preset("speedrun"));
  EXPECT_EQ(config_to_json(back), config_to_json(c));
}

TEST(Config, PrecisionIsAutoByDefaultAndResolvesFromTheCpu) {
  Config c = preset("cpu");
  EXPECT_EQ(c.precision, PrecisionSetting::kAuto);
  EXPECT_EQ(config_to_json(c)["precision"], "auto");  // the key keeps its spelling
  // auto is bf16 exactly when the bf16 GEMM multiplies bf16 natively (AMX, or AVX512-BF16
  // where it beat the FMA kernel), and never without BF16 instructions.
  const MicroKernel& bf16_kernel = active_bf16_microkernel();
  EXPECT_EQ(resolved_precision(c), bf16_kernel.bf16_products ? Precision::kBf16 : Precision::kFp32);
  if (!cpu_info().avx512_bf16 && !cpu_info().amx_bf16) {
    EXPECT_EQ(resolved_precision(c), Precision::kFp32);
  }
  set_config_value(c, "precision=fp32");
  EXPECT_EQ(c.precision, PrecisionSetting::kFp32);
  EXPECT_EQ(resolved_precision(c), Precision::kFp32);
  set_config_value(c, "precision=\"bf16\"");  // JSON spelling works too
  EXPECT_EQ(c.precision, PrecisionSetting::kBf16);
  EXPECT_EQ(resolved_precision(c), Precision::kBf16);
  EXPECT_EQ(config_from_json(config_to_json(c), preset("cpu")).precision, PrecisionSetting::kBf16);
  // Anything else is refused where it is parsed, naming the key and the choices; the
  // configuration keeps its value.
  for (const char* bad : {"precision=fp16", "precision=AUTO", "precision="}) {
    const std::string e = input_error([&] { set_config_value(c, bad); });
    EXPECT_NE(e.find("'precision' must be \"auto\", \"fp32\" or \"bf16\""), std::string::npos) << e;
  }
  EXPECT_EQ(c.precision, PrecisionSetting::kBf16);
  EXPECT_NE(input_error([] {
              config_from_json({{"precision", 16}}, preset("cpu"));
            }).find("precision"),
            std::string::npos);
}

TEST(Config, ErrorsNameTheFieldAndWhatIsAllowed) {
  Config c = preset("cpu");
  EXPECT_NE(input_error([&] { set_config_value(c, "num_layerz=8"); }).find("known keys"),
            std::string::npos);
  EXPECT_NE(input_error([&] { set_config_value(c, "num_layers=eight"); }).find("num_layers"),
            std::string::npos);
  EXPECT_NE(input_error([&] { set_config_value(c, "num_layers=2.5"); }).find("an integer"),
            std::string::npos);
  EXPECT_NE(input_error([&] { set_config_value(c, "novalue"); }).find("key=value"),
            std::string::npos);
  Config bad = preset("cpu");
  bad.num_layers = 7;
  EXPECT_NE(input_error([&] { validate_config(bad); }).find("num_layers"), std::string::npos);
  bad = preset("cpu");
  bad.train_seq_len = 100;
  EXPECT_NE(input_error([&] { validate_config(bad); }).find("train_seq_len"), std::string::npos);
  bad = preset("cpu");
  bad.model_dim = 100;
  EXPECT_NE(input_error([&] { validate_config(bad); }).find("model_dim"), std::string::npos);
  bad = preset("cpu");
  bad.tokens_per_step = 1000;
  EXPECT_NE(input_error([&] { validate_config(bad); }).find("tokens_per_step"), std::string::npos);
  EXPECT_NE(input_error([] { load_config("nonexistent-preset"); }).find("speedrun"),
            std::string::npos);
}

TEST(Config, LoadsJsonFileOverAPreset) {
  TempDir dir;
  write_file_atomic(dir.path() + "/c.json", R"({"preset": "speedrun", "num_iterations": 10})");
  Config c = load_config(dir.path() + "/c.json");
  EXPECT_EQ(c.num_iterations, 10);
  EXPECT_EQ(c.model_dim, 768);
  write_file_atomic(dir.path() + "/bad.json", R"({"num_iterations": "ten"})");
  EXPECT_NE(input_error([&] { load_config(dir.path() + "/bad.json"); }).find("bad.json"),
            std::string::npos);
}

TEST(Config, OriginsRecordTheKeysSetExplicitly) {
  TempDir dir;
  const std::string path = dir.path() + "/c.json";
  write_file_atomic(path, R"({"preset": "cpu", "vocab_size": 1024, "num_iterations": 10})");
  ConfigOrigins origins;
  Config c = load_config(path, &origins);
  set_config_value(c, "eot_id=1023", &origins);
  set_config_value(c, "num_iterations=20", &origins);
  EXPECT_EQ(origins, (ConfigOrigins{{"vocab_size", "configuration file '" + path + "'"},
                                    {"eot_id", "--set eot_id=1023"},
                                    {"num_iterations", "--set num_iterations=20"}}));
  ConfigOrigins from_preset;
  load_config("cpu", &from_preset);
  EXPECT_TRUE(from_preset.empty());
  // A refused value is not recorded.
  EXPECT_THROW(set_config_value(c, "seed=x", &origins), InputError);
  EXPECT_EQ(origins.count("seed"), 0u);
}

}  // namespace
}  // namespace nanogpt
