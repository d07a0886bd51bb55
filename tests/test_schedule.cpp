#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>

#include "config/config.hpp"
#include "optim/muon.hpp"
#include "optim/schedule.hpp"
#include "runtime/error.hpp"
#include "train/attention_window.hpp"

namespace nanogpt {
namespace {

// Expected values were computed by hand from the seed's Python (get_lr, the momentum warm-up,
// next_multiple_of_n), for the speedrun's 1770 steps and 0.4 cooldown.
constexpr int64_t kSteps = 1770;

TEST(Schedule, LrMultiplierEdges) {
  EXPECT_EQ(lr_multiplier(0, kSteps, 0.4), 1.0);
  EXPECT_EQ(lr_multiplier(885, kSteps, 0.4), 1.0);
  EXPECT_EQ(lr_multiplier(1061, kSteps, 0.4), 1.0);
  // 1062/1770 = 0.6 = 1 − 0.4 exactly in double: the first cooldown step, at weight 1.
  EXPECT_DOUBLE_EQ(lr_multiplier(1062, kSteps, 0.4), 1.0);
  // w = (708 − 1)/708 = 0.99858757...; 0.1 + 0.9·w.
  EXPECT_DOUBLE_EQ(lr_multiplier(1063, kSteps, 0.4), 0.998728813559322);
  EXPECT_DOUBLE_EQ(lr_multiplier(1416, kSteps, 0.4), 0.55);  // x = 0.8, w = 0.5
  EXPECT_DOUBLE_EQ(lr_multiplier(1769, kSteps, 0.4), 0.10127118644067803);
  EXPECT_DOUBLE_EQ(lr_multiplier(kSteps, kSteps, 0.4), 0.1);
}

TEST(Schedule, LrMultiplierIsMonotoneAndConfigurable) {
  double prev = 2.0;
  for (int64_t step = 0; step <= kSteps; ++step) {
    const double m = lr_multiplier(step, kSteps, 0.4);
    EXPECT_LE(m, prev) << step;
    EXPECT_GE(m, 0.1) << step;
    prev = m;
  }
  EXPECT_DOUBLE_EQ(lr_multiplier(50, 100, 1.0), 0.55);  // cooldown from the start
  EXPECT_EQ(lr_multiplier(100, 100, 0.0), 1.0);         // no cooldown at all
  EXPECT_THROW(lr_multiplier(101, 100, 0.4), Error);
  EXPECT_THROW(lr_multiplier(-1, 100, 0.4), Error);
  EXPECT_THROW(lr_multiplier(0, 0, 0.4), Error);
  EXPECT_THROW(lr_multiplier(0, 100, 1.5), Error);
}

TEST(Schedule, MuonMomentumWarmup) {
  const MuonConfig config;
  EXPECT_DOUBLE_EQ(muon_momentum(0, config), 0.85);
  EXPECT_DOUBLE_EQ(muon_momentum(150, config), 0.90);
  EXPECT_DOUBLE_EQ(muon_momentum(300, config), 0.95);
  EXPECT_DOUBLE_EQ(muon_momentum(1000, config), 0.95);
  MuonConfig custom;
  custom.momentum_start = 0.5;
  custom.momentum_end = 0.9;
  custom.momentum_warmup_steps = 10;
  EXPECT_DOUBLE_EQ(muon_momentum(5, custom), 0.7);
  custom.momentum_warmup_steps = 0;
  EXPECT_DOUBLE_EQ(muon_momentum(0, custom), 0.9);
  EXPECT_THROW(muon_momentum(-1, config), Error);
}

TEST(Schedule, WindowBlocks) {
  EXPECT_EQ(window_blocks(0, kSteps), 1);              // 0 tokens still gets one block
  EXPECT_EQ(window_blocks(1, kSteps), 1);              // 0.98 tokens
  EXPECT_EQ(window_blocks(kSteps / 2, kSteps), 7);     // 864 tokens → 896
  EXPECT_EQ(window_blocks(kSteps - 1, kSteps), 14);    // 1727.02 tokens → 1792
  EXPECT_EQ(window_blocks(kSteps, kSteps), 14);        // 1728 tokens → 1792
  EXPECT_EQ(window_blocks(kSteps, kSteps, 2048), 16);  // configurable end point
  EXPECT_EQ(window_blocks(10, 20, 1728, 64), 14);      // and block: 864 → 896 = 14·64
  // An exact multiple stays put: 1280·3/10 = 384 = 3 blocks, not 4.
  EXPECT_EQ(window_blocks(3, 10, 1280), 3);
  EXPECT_EQ(window_blocks(10, 10, 1280), 10);
  int64_t prev = 0;
  for (int64_t step = 0; step <= kSteps; ++step) {
    const int64_t w = window_blocks(step, kSteps);
    EXPECT_GE(w, prev) << step;
    EXPECT_LE(w - prev, 1) << step;
    prev = w;
  }
  EXPECT_THROW(window_blocks(kSteps + 1, kSteps), Error);
  EXPECT_THROW(window_blocks(0, kSteps, 1728, 0), Error);
}

Config window_config(int64_t train_seq_len, int64_t block_size, int64_t max_window_tokens,
                     int64_t num_iterations) {
  Config c = preset("cpu");
  c.train_seq_len = train_seq_len;
  c.block_size = block_size;
  c.max_window_tokens = max_window_tokens;
  c.num_iterations = num_iterations;
  return c;
}

TEST(Schedule, AttentionWindowAtFollowsTheSeedWithinATrainingSequence) {
  // The seed's 1770 steps: 14 blocks of 128 at the end, well inside a 48K-token sequence.
  const Config seed = preset("speedrun");
  EXPECT_EQ(max_window_blocks(seed), 384);
  for (int64_t step : {0, 1, 885, 1769, 1770}) {
    EXPECT_EQ(attention_window_at(seed, step), window_blocks(step, 1770)) << step;
  }
  EXPECT_EQ(attention_window_at(seed, 1770), 14);
  // cpu: the schedule ends at exactly a whole 512-token sequence, 4 blocks.
  const Config cpu = preset("cpu");
  EXPECT_EQ(max_window_blocks(cpu), 4);
  EXPECT_EQ(attention_window_at(cpu, 0), 1);
  EXPECT_EQ(attention_window_at(cpu, cpu.num_iterations), 4);
}

TEST(Schedule, AttentionWindowAtIsClampedToATrainingSequence) {
  // max_window_tokens 2048 = 16 blocks of 128 against sequences of 512 tokens = 4 blocks.
  const Config c = window_config(512, 128, 2048, 100);
  EXPECT_EQ(max_window_blocks(c), 4);
  EXPECT_EQ(window_blocks(100, 100, 2048, 128), 16);
  int64_t prev = 1;
  for (int64_t step = 0; step <= 100; ++step) {
    const int64_t w = attention_window_at(c, step);
    EXPECT_EQ(w, std::min<int64_t>(4, window_blocks(step, 100, 2048, 128))) << step;
    EXPECT_GE(w, prev) << step;
    EXPECT_LE(w, 4) << step;
    prev = w;
  }
  EXPECT_EQ(attention_window_at(c, 12), 2);  // 245.76 tokens → 2 blocks, below the clamp
  EXPECT_EQ(attention_window_at(c, 100), 4);
  EXPECT_THROW(attention_window_at(c, 101), Error);
  EXPECT_THROW(attention_window_at(c, -1), Error);
}

TEST(Schedule, LayerWindowsAreHalfForShortLayersAndAtLeastOneBlock) {
  const Config seed = preset("speedrun");  // long layers 0, 4, 7, 11
  EXPECT_EQ(seed.layer_window_blocks(0, 14), 14);
  EXPECT_EQ(seed.layer_window_blocks(1, 14), 7);
  EXPECT_EQ(seed.layer_window_blocks(1, 3), 1);
  EXPECT_EQ(seed.layer_window_blocks(1, 1), 1);
  EXPECT_EQ(seed.layer_window_blocks(11, 1), 1);
}

}  // namespace
}  // namespace nanogpt
