#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <stdexcept>
#include <thread>
#include <vector>

#include "runtime/error.hpp"
#include "runtime/thread_pool.hpp"

namespace nanogpt {
namespace {

TEST(ThreadPool, RunsEveryTaskExactlyOnce) {
  for (int threads : {1, 2, 3}) {
    ThreadPool pool(threads);
    for (size_t n : {0u, 1u, 2u, 7u, 1000u}) {
      std::vector<std::atomic<int>> hits(n);
      pool.parallel_for(n, [&](size_t t, int worker) {
        ASSERT_LT(worker, threads);
        hits[t]++;
      });
      for (size_t i = 0; i < n; ++i) ASSERT_EQ(hits[i].load(), 1) << "task " << i;
    }
  }
}

// Thread w of P starts on the first task of its share, w·n/P: a product's threads so write the
// same parts of C on every call. Each thread's first task waits until every thread holds one,
// so none can finish its share and take from another's before that one has started.
TEST(ThreadPool, EachThreadStartsOnItsOwnShare) {
  for (int threads : {2, 3}) {
    ThreadPool pool(threads);
    for (size_t n : {static_cast<size_t>(threads), size_t{10}, size_t{101}}) {
      std::vector<std::atomic<int64_t>> first(static_cast<size_t>(threads));
      for (auto& f : first) f = -1;
      std::atomic<int> started{0};
      std::vector<std::atomic<int>> hits(n);
      pool.parallel_for(n, [&](size_t t, int worker) {
        hits[t]++;
        int64_t none = -1;
        if (first[static_cast<size_t>(worker)].compare_exchange_strong(none,
                                                                       static_cast<int64_t>(t))) {
          started++;
          while (started.load() < threads) std::this_thread::yield();
        }
      });
      for (size_t i = 0; i < n; ++i) ASSERT_EQ(hits[i].load(), 1) << "task " << i;
      for (int w = 0; w < threads; ++w) {
        EXPECT_EQ(first[static_cast<size_t>(w)].load(),
                  static_cast<int64_t>(static_cast<size_t>(w) * n / static_cast<size_t>(threads)))
            << "thread " << w << " of " << threads << ", " << n << " tasks";
      }
    }
  }
}

TEST(ThreadPool, PropagatesExceptionsAndStaysUsable) {
  ThreadPool pool(2);
  EXPECT_THROW(pool.parallel_for(100,
                                 [](size_t t, int) {
                                   if (t == 37) throw std::runtime_error("task 37 failed");
                                 }),
               std::runtime_error);
  std::atomic<int> count{0};
  pool.parallel_for(50, [&](size_t, int) { count++; });
  EXPECT_EQ(count.load(), 50);
}

// Workers spin between jobs, then sleep (NANOGPT_POOL_SPIN_US): jobs back to back (caught
// spinning) and jobs after a pause longer than the spin (workers asleep) must both run every
// task once, with every worker taking part, whatever the spin time.
TEST(ThreadPool, JobsBackToBackAndAfterSleepsRunEveryTask) {
  for (const char* spin : {"0", "50", "200"}) {
    setenv("NANOGPT_POOL_SPIN_US", spin, 1);
    ThreadPool pool(3);
    for (int round = 0; round < 400; ++round) {
      if (round % 100 == 99) std::this_thread::sleep_for(std::chrono::milliseconds(2));
      const size_t n = 1 + static_cast<size_t>(round % 9);
      std::vector<std::atomic<int>> hits(n);
      pool.parallel_for(n, [&](size_t t, int) { hits[t]++; });
      for (size_t i = 0; i < n; ++i) ASSERT_EQ(hits[i].load(), 1) << "spin " << spin;
    }
  }
  unsetenv("NANOGPT_POOL_SPIN_US");
}

TEST(ThreadPool, ABadSpinTimeIsAnInputError) {
  for (const char* bad : {"-1", "fast", "2000000", ""}) {
    setenv("NANOGPT_POOL_SPIN_US", bad, 1);
    EXPECT_THROW(ThreadPool::spin_microseconds(), InputError) << bad;
  }
  setenv("NANOGPT_POOL_SPIN_US", "75", 1);
  EXPECT_EQ(ThreadPool::spin_microseconds(), 75);
  unsetenv("NANOGPT_POOL_SPIN_US");
  EXPECT_EQ(ThreadPool::spin_microseconds(), 200);
}

}  // namespace
}  // namespace nanogpt
