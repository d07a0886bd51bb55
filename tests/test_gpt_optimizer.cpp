// GptOptimizer::step runs Muon's matrices as tasks on the thread pool; the parameters and the
// whole optimizer state after it must not depend on the number of threads or on which worker
// ran which matrix.
#include <gtest/gtest.h>

#include <span>

#include <cstring>
#include <string>
#include <vector>

#include "model/gpt.hpp"
#include "optim/gpt_optimizer.hpp"
#include "runtime/error.hpp"
#include "runtime/random.hpp"
#include "runtime/thread_pool.hpp"
#include "support/model.hpp"

namespace nanogpt {
namespace {

struct Snapshot {
  std::vector<float> params;
  std::vector<std::vector<float>> state;
  std::vector<std::string> state_names;
};

// Three steps on fresh random non-zero gradients each, so the Muon buffers and Adam moments
// carry history, all on a pool of `threads` threads.
Snapshot run_steps(const Config& c, Precision precision, ParameterSet params, int threads) {
  ThreadPool pool(threads);
  ThreadPool::Use use(pool);
  GptOptimizer opt(params, c, precision);
  Rng rng(17);
  std::vector<float> grads(params.size());
  for (int64_t step = 0; step < 3; ++step) {
    for (float& g : grads) g = static_cast<float>(0.01 * rng.normal());
    opt.step(params, grads, step);
  }
  Snapshot s;
  s.params.assign(params.values().begin(), params.values().end());
  for (const auto& t : opt.export_state()) {
    s.state_names.push_back(t.name);
    s.state.push_back(t.data);
  }
  return s;
}

size_t differing(std::span<const float> a, std::span<const float> b) {
  EXPECT_EQ(a.size(), b.size());
  size_t n = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    if (std::memcmp(&a[i], &b[i], sizeof(float)) != 0) ++n;
  }
  return n;
}

void expect_bitwise_equal(const Snapshot& one, const Snapshot& other, int threads) {
  EXPECT_EQ(differing(one.params, other.params), 0u) << threads << " threads: parameters";
  ASSERT_EQ(one.state_names, other.state_names);
  for (size_t i = 0; i < one.state.size(); ++i) {
    EXPECT_EQ(differing(one.state[i], other.state[i]), 0u)
        << threads << " threads: " << one.state_names[i];
  }
}

ParameterSet model_parameters(const Config& c) {
  Gpt model(c);
  model.init_parameters(5);
  return model.params();
}

void check_thread_counts(const Config& c, Precision precision, const ParameterSet& params) {
  const Snapshot one = run_steps(c, precision, params, 1);
  EXPECT_NE(differing(one.params, params.values()), 0u) << "the steps should move the weights";
  expect_bitwise_equal(one, run_steps(c, precision, params, 2), 2);
  expect_bitwise_equal(one, run_steps(c, precision, params, 3), 3);
}

TEST(GptOptimizer, StepIsBitwiseIdenticalForAnyThreadCount) {
  for (Precision precision : {Precision::kFp32, Precision::kBf16}) {
    SCOPED_TRACE(precision_name(precision));
    Config c = micro_config();
    // Wider than the micro model, so MLP matrices (640×160) span two element-wise chunks.
    c.model_dim = 160;
    c.head_dim = 40;
    c.num_heads = 4;
    check_thread_counts(c, precision, model_parameters(c));
  }
}

TEST(GptOptimizer, MatricesOnTheWholePoolGiveTheSameBits) {
  // One matrix far larger than the rest: on 2 and 3 threads it runs before the task batch with
  // its products on the whole pool (see muon_matrices_on_whole_pool); still the same bits.
  Config c = micro_config();
  ParameterSet params;
  params.add("embed", {50, 16}, ParamGroup::kEmbedding);
  params.add("big", {320, 96}, ParamGroup::kMatrix);
  params.add("qkv", {3, 16, 24}, ParamGroup::kMatrix);
  params.add("small", {24, 16}, ParamGroup::kMatrix);
  params.add("scalars", {5}, ParamGroup::kScalar);
  params.allocate();
  Rng rng(3);
  for (float& p : params.values()) p = static_cast<float>(0.1 * rng.normal());
  for (Precision precision : {Precision::kFp32, Precision::kBf16}) {
    SCOPED_TRACE(precision_name(precision));
    check_thread_counts(c, precision, params);
  }
}

TEST(GptOptimizer, WholePoolOnlyForAMatrixLargerThanItsShare) {
  EXPECT_EQ(muon_matrices_on_whole_pool({10, 1, 1}, 1), 0u);  // one thread: tasks only
  EXPECT_EQ(muon_matrices_on_whole_pool({10, 1, 1}, 2), 1u);  // 10 > 12/2
  EXPECT_EQ(muon_matrices_on_whole_pool({6, 6}, 2), 0u);      // two equal tasks fit two threads
  EXPECT_EQ(muon_matrices_on_whole_pool({6, 6}, 3), 2u);      // a third thread would idle
  EXPECT_EQ(muon_matrices_on_whole_pool({3, 3, 1, 1, 1, 1}, 2), 0u);
  EXPECT_EQ(muon_matrices_on_whole_pool({8, 5, 1, 1}, 2), 2u);  // 8 > 15/2, then 5 > 7/2
  EXPECT_EQ(muon_matrices_on_whole_pool({}, 4), 0u);
}

TEST(GptOptimizer, ErrorInATaskPropagates) {
  // A momentum outside [0, 1] makes every muon_update throw, inside the pool's tasks.
  const Config valid = micro_config();
  const ParameterSet params = model_parameters(valid);
  Config c = valid;  // not validated by the optimizer
  c.muon_momentum_start = c.muon_momentum_end = 1.5;
  for (int threads : {1, 2, 3}) {
    ThreadPool pool(threads);
    ThreadPool::Use use(pool);
    ParameterSet p = params;
    GptOptimizer opt(p, c, Precision::kFp32);
    std::vector<float> grads(p.size(), 0.01f);
    EXPECT_THROW(opt.step(p, grads, 0), Error) << threads << " threads";
    // The pool is usable afterwards.
    std::atomic<int> ran{0};
    pool.parallel_for(4, [&](size_t, int) { ++ran; });
    EXPECT_EQ(ran.load(), 4);
  }
}

}  // namespace
}  // namespace nanogpt
