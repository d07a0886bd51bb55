// Splitting element-wise optimizer loops over the thread pool. Chunk boundaries depend only on
// the element count, never on the number of threads, so anything computed per chunk (including
// partial sums combined in chunk order) is bitwise the same on any pool.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "runtime/thread_pool.hpp"

namespace nanogpt {

// Large enough that a task's work dwarfs the pool's hand-out cost, small enough that an
// embedding table (~40M elements) still spreads over many threads.
inline constexpr int64_t kElementwiseChunk = 1 << 16;

inline int64_t elementwise_chunks(int64_t n) {
  return std::max<int64_t>(1, (n + kElementwiseChunk - 1) / kElementwiseChunk);
}

// Calls fn(chunk, begin, end) for each fixed chunk of [0, n).
template <typename Fn>
void for_each_chunk(int64_t n, Fn&& fn) {
  const int64_t chunks = elementwise_chunks(n);
  auto body = [&](int64_t chunk) {
    const int64_t begin = chunk * kElementwiseChunk;
    fn(chunk, begin, std::min(n, begin + kElementwiseChunk));
  };
  // A single chunk runs inline: most optimizer tensors are small, and waking the pool for
  // them would cost more than the work.
  if (chunks == 1) {
    body(0);
    return;
  }
  ThreadPool::current().parallel_for(static_cast<size_t>(chunks),
                                     [&](size_t chunk, int) { body(static_cast<int64_t>(chunk)); });
}

}  // namespace nanogpt
