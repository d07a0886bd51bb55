// A training step of the whole model is bitwise the same on 1, 2 and 3 threads, in both
// precisions: every kernel splits work over outputs only and reduces in a fixed order, so a run
// reproduces on any machine size.
#include <gtest/gtest.h>

#include <cstring>

#include "model/gpt.hpp"
#include "runtime/random.hpp"
#include "runtime/thread_pool.hpp"
#include "support/model.hpp"

namespace nanogpt {
namespace {

void expect_bitwise_equal(const StepResult& a, const StepResult& b, int threads) {
  EXPECT_EQ(std::memcmp(&a.loss, &b.loss, sizeof(double)), 0) << threads << " threads: loss";
  ASSERT_EQ(a.grads.size(), b.grads.size());
  size_t differing = 0;
  for (size_t i = 0; i < a.grads.size(); ++i) {
    if (std::memcmp(&a.grads[i], &b.grads[i], sizeof(float)) != 0) ++differing;
  }
  EXPECT_EQ(differing, 0u) << threads << " threads: gradient entries differ from 1 thread";
}

TEST(GptThreads, TrainingStepIsBitwiseIdenticalForAnyThreadCount) {
  for (const char* precision : {"fp32", "bf16"}) {
    SCOPED_TRACE(precision);
    Config c = micro_config();
    set_config_value(c, std::string("precision=") + precision);
    const StepResult one = run_step(c, 1);
    EXPECT_TRUE(std::isfinite(one.loss));
    expect_bitwise_equal(one, run_step(c, 2), 2);
    expect_bitwise_equal(one, run_step(c, 3), 3);
  }
}

// Grouped-query attention: dk, dv of a shared head sum over its query group in a fixed order.
TEST(GptThreads, GroupedQueryAttentionStepIsBitwiseIdenticalForAnyThreadCount) {
  for (const char* precision : {"fp32", "bf16"}) {
    SCOPED_TRACE(precision);
    Config c = micro_config();
    c.num_heads = 4;
    c.head_dim = 8;
    c.num_kv_heads = 2;
    set_config_value(c, std::string("precision=") + precision);
    const StepResult one = run_step(c, 1);
    EXPECT_TRUE(std::isfinite(one.loss));
    expect_bitwise_equal(one, run_step(c, 2), 2);
    expect_bitwise_equal(one, run_step(c, 3), 3);
  }
}

// Value embeddings wider than one column range (64) of their gradient's accumulation, the last
// range partial: threads take disjoint columns, each in token order.
TEST(GptThreads, WideValueEmbeddingStepIsBitwiseIdenticalForAnyThreadCount) {
  Config c = micro_config();
  c.num_heads = 3;
  c.head_dim = 48;  // value rows of 144: ranges of 64, 64 and 16
  c.model_dim = 144;
  set_config_value(c, "precision=bf16");
  ASSERT_TRUE(c.value_embeddings);
  const StepResult one = run_step(c, 1);
  EXPECT_TRUE(std::isfinite(one.loss));
  expect_bitwise_equal(one, run_step(c, 2), 2);
  expect_bitwise_equal(one, run_step(c, 3), 3);
}

}  // namespace
}  // namespace nanogpt
