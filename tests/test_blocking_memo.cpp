#include "kernels/gemm/blocking_memo.hpp"

#include <gtest/gtest.h>

#include <bit>
#include <functional>
#include <string>
#include <vector>

#include "kernels/autotune.hpp"
#include "kernels/gemm/blocking.hpp"
#include "kernels/gemm/driver.hpp"
#include "runtime/thread_pool.hpp"
#include "support/fixtures.hpp"

namespace nanogpt {
namespace {

BlockingQuery query(int64_t M) {
  return blocking_query(7, active_microkernel(), PackSource::kF32, Trans::kYes, Trans::kNo, false,
                        2, M, 256, 512);
}

GemmBlocking blocking(int64_t mc) {
  return {mc, 256, 128};
}

TEST(BlockingMemo, FindsWhatWasRememberedForThatQueryOnly) {
  BlockingMemo memo;
  EXPECT_EQ(memo.find(query(64)), nullptr);
  memo.remember(query(64), blocking(32));
  memo.remember(query(128), blocking(96));
  ASSERT_NE(memo.find(query(64)), nullptr);
  EXPECT_EQ(*memo.find(query(64)), blocking(32));
  ASSERT_NE(memo.find(query(128)), nullptr);
  EXPECT_EQ(*memo.find(query(128)), blocking(96));
  // A query differing in any one thing the choice depends on is another question.
  std::vector<std::function<void(BlockingQuery&)>> changes = {
      [](BlockingQuery& q) { q.tuner = 8; },
      [](BlockingQuery& q) { q.isa = "other"; },
      [](BlockingQuery& q) { q.mr += 1; },
      [](BlockingQuery& q) { q.nr += 1; },
      [](BlockingQuery& q) { q.k_step += 1; },
      [](BlockingQuery& q) { q.kernel_blocking.kc += 1; },
      [](BlockingQuery& q) { q.a = PackSource::kBf16; },
      [](BlockingQuery& q) { q.b = PackSource::kF32ToBf16; },
      [](BlockingQuery& q) { q.trans_a = Trans::kNo; },
      [](BlockingQuery& q) { q.trans_b = Trans::kYes; },
      [](BlockingQuery& q) { q.packed_b = true; },
      [](BlockingQuery& q) { q.threads = 1; },
      [](BlockingQuery& q) { q.N += 1; },
      [](BlockingQuery& q) { q.K += 1; },
  };
  for (size_t i = 0; i < changes.size(); ++i) {
    BlockingQuery q = query(64);
    changes[i](q);
    EXPECT_EQ(memo.find(q), nullptr) << "change " << i;
  }
}

TEST(BlockingMemo, HoldsTheLastEntriesAndReplacesTheOldest) {
  BlockingMemo memo;
  const int n = BlockingMemo::kEntries;
  for (int i = 0; i <= n; ++i) memo.remember(query(i + 1), blocking(8 * (i + 1)));
  EXPECT_EQ(memo.find(query(1)), nullptr);
  for (int i = 1; i <= n; ++i) {
    const GemmBlocking* b = memo.find(query(i + 1));
    ASSERT_NE(b, nullptr) << i;
    EXPECT_EQ(*b, blocking(8 * (i + 1))) << i;
  }
  memo.remember(query(n + 2), blocking(8));
  EXPECT_EQ(memo.find(query(2)), nullptr);
  ASSERT_NE(memo.find(query(3)), nullptr);
}

// chosen_blocking() remembers its answers per tuning cache: with the cache in use switched back
// and forth, each call gives that cache's choice (here a kOff cache's default and a choice
// seeded into a tuned cache's file), not the last one remembered.
TEST(BlockingMemo, ChosenBlockingFollowsTheTuningCacheInUse) {
  ThreadPool one(1);
  const ThreadPool::Use in_one(one);
  const MicroKernel& kernel = active_microkernel();
  const int64_t M = 256, N = 256, K = 512;  // above the autotuner's 2^24 multiply-adds
  const std::vector<float> A(M * K, 0.5f), B(K * N, 0.25f), C(M * N, 0.0f);
  auto chosen = [&] {
    return chosen_blocking(kernel, PackSource::kF32, Trans::kNo, Trans::kNo, M, N, K, A.data(), K,
                           B.data(), N, 0.0f, C.data(), N);
  };
  const GemmBlocking fallback = default_blocking(kernel, M, N, K, 1);

  // Seed a choice other than the default under the key the driver looks up.
  const int64_t key_m = static_cast<int64_t>(std::bit_ceil(static_cast<uint64_t>(M)));
  const std::vector<GemmBlocking> candidates = blocking_candidates(kernel, key_m, N, K, 1);
  std::vector<std::string> names;
  size_t seeded = 0;
  for (size_t i = 0; i < candidates.size(); ++i) {
    names.push_back(candidates[i].name());
    if (!(normalized(candidates[i], kernel, M, N, K) == fallback)) seeded = i;
  }
  ASSERT_NE(seeded, 0u) << "every candidate fits to the default here; pick another shape";
  TempDir dir;
  AutotuneCache tuned(dir.path(), CpuIdentity::current(), AutotuneMode::kOn);
  std::vector<double> times(names.size(), 1.0);
  times[seeded] = 0.5;
  ASSERT_EQ(tuned.choose({"gemm_nn_threads1", key_m, N, K, "f32", kernel.isa}, names, 0,
                         [&](size_t i) { return times[i]; }),
            seeded);
  const GemmBlocking want = normalized(candidates[seeded], kernel, M, N, K);

  AutotuneCache off("", CpuIdentity::current(), AutotuneMode::kOff);
  for (int round = 0; round < 2; ++round) {
    {
      const AutotuneCache::Use use(off);
      EXPECT_EQ(chosen(), fallback) << round;
      EXPECT_EQ(chosen(), fallback) << round;
    }
    {
      const AutotuneCache::Use use(tuned);
      EXPECT_EQ(chosen(), want) << round;
      EXPECT_EQ(chosen(), want) << round;
    }
  }
}

}  // namespace
}  // namespace nanogpt
