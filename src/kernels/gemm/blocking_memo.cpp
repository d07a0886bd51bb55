#include "kernels/gemm/blocking_memo.hpp"

namespace nanogpt {

BlockingQuery blocking_query(uint64_t tuner, const MicroKernel& kernel, PackSources sources,
                             Trans trans_a, Trans trans_b, bool packed_b, int threads, int64_t M,
                             int64_t N, int64_t K) {
  BlockingQuery q;
  q.tuner = tuner;
  q.isa = kernel.isa;
  q.mr = kernel.mr;
  q.nr = kernel.nr;
  q.k_step = kernel.k_step;
  q.kernel_blocking = kernel.blocking;
  q.a = sources.a;
  q.b = sources.b;
  q.trans_a = trans_a;
  q.trans_b = trans_b;
  q.packed_b = packed_b;
  q.threads = threads;
  q.M = M;
  q.N = N;
  q.K = K;
  return q;
}

const GemmBlocking* BlockingMemo::find(const BlockingQuery& q) const {
  for (const Entry& e : entries_) {
    if (e.used && e.query == q) return &e.blocking;
  }
  return nullptr;
}

void BlockingMemo::remember(const BlockingQuery& q, const GemmBlocking& b) {
  Entry& e = entries_[static_cast<size_t>(next_)];
  e = {q, b, true};
  next_ = (next_ + 1) % kEntries;
}

}  // namespace nanogpt
