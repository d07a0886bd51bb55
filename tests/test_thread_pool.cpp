#include <gtest/gtest.h>

#include <atomic>
#include <stdexcept>

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

}  // namespace
}  // namespace nanogpt
