// The blockings a thread's last GEMM calls chose, so that a call whose choice is already known
// skips the autotuner's lookup: that builds every candidate blocking, its name and the key
// string and searches the tuning cache's map under its lock, ~2 µs a call (measured on an Intel
// Xeon with AMX, 2026-12-05), 4–7% of a 512 × 256 × 256 bf16 product on two threads (29–50 µs).
// Every blocking gives the same bits (gemm/blocking.hpp), so a remembered choice can only change
// the speed.
#pragma once

#include <array>
#include <cstdint>

#include "kernels/gemm.hpp"
#include "kernels/gemm/microkernel.hpp"

namespace nanogpt {

// Everything chosen_blocking()'s answer depends on: the tuning cache in use (by its id, unique
// over the process's lifetime), what fixes the kernel's candidates, and the product.
struct BlockingQuery {
  uint64_t tuner = 0;  // AutotuneCache::id()
  const char* isa = nullptr;
  int64_t mr = 0, nr = 0, k_step = 0;
  GemmBlocking kernel_blocking;
  PackSource a = PackSource::kF32, b = PackSource::kF32;
  Trans trans_a = Trans::kNo, trans_b = Trans::kNo;
  bool packed_b = false;
  int threads = 0;
  int64_t M = 0, N = 0, K = 0;
  bool operator==(const BlockingQuery&) const = default;
};

BlockingQuery blocking_query(uint64_t tuner, const MicroKernel& kernel, PackSources sources,
                             Trans trans_a, Trans trans_b, bool packed_b, int threads, int64_t M,
                             int64_t N, int64_t K);

// A fixed number of (query, blocking) pairs, the oldest replaced first: a training step cycles
// through a few dozen shapes, a batched decode through one per height.
class BlockingMemo {
 public:
  static constexpr int kEntries = 64;

  // The blocking remembered for `q`, if any.
  const GemmBlocking* find(const BlockingQuery& q) const;
  void remember(const BlockingQuery& q, const GemmBlocking& b);

 private:
  struct Entry {
    BlockingQuery query;
    GemmBlocking blocking;
    bool used = false;
  };
  std::array<Entry, kEntries> entries_{};
  int next_ = 0;  // the entry remember() fills next
};

}  // namespace nanogpt
