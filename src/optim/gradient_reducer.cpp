#include "optim/gradient_reducer.hpp"

#include <algorithm>
#include <string>

#include "runtime/error.hpp"
#include "runtime/profiler.hpp"

namespace nanogpt {

GradientReducer::GradientReducer(std::vector<ShardPiece> pieces,
                                 std::span<const int> tensor_ready_stage, double bucket_mb,
                                 Comm& comm)
    : comm_(comm),
      buckets_(plan(std::move(pieces), tensor_ready_stage, bucket_mb, comm.size(), comm.rank())) {
  const auto [send, recv] = lay_out_groups(buckets_, comm_.size(), comm_.rank());
  send_.assign(send, 0.0f);
  recv_.assign(recv, 0.0f);
}

std::vector<GradientReducer::Bucket> GradientReducer::plan(std::vector<ShardPiece> pieces,
                                                           std::span<const int> tensor_ready_stage,
                                                           double bucket_mb, int ranks, int rank) {
  std::vector<Bucket> buckets;
  auto stage_of = [&](const ShardPiece& p) {
    return tensor_ready_stage[static_cast<size_t>(p.tensor)];
  };
  // In the order the backward finalises them; within a stage, later tensors first (the
  // backward runs a block from its output down). Stable: the order is the same on every rank.
  std::stable_sort(pieces.begin(), pieces.end(), [&](const ShardPiece& a, const ShardPiece& b) {
    if (stage_of(a) != stage_of(b)) return stage_of(a) < stage_of(b);
    return a.offset > b.offset;
  });
  const double limit_floats = bucket_mb * 1024.0 * 1024.0 / sizeof(float);
  std::vector<ShardPiece> current;
  double current_floats = 0;
  auto close = [&] {
    if (current.empty()) return;
    Bucket b;
    b.pieces = std::move(current);
    current.clear();
    current_floats = 0;
    for (const ShardPiece& p : b.pieces) b.ready_stage = std::max(b.ready_stage, stage_of(p));
    buckets.push_back(std::move(b));
  };
  for (const ShardPiece& p : pieces) {
    if (!current.empty() && current_floats + static_cast<double>(p.length) > limit_floats) close();
    current.push_back(p);
    current_floats += static_cast<double>(p.length);
  }
  close();
  lay_out_groups(buckets, ranks, rank);
  return buckets;
}

void GradientReducer::begin(float* grads) {
  if (next_ != 0) throw Error("internal: a gradient reduction began before the last one finished");
  grads_ = grads;
}

void GradientReducer::start(Bucket& b) {
  ProfileScope scope("comm", "gradient_bucket.pack", {static_cast<int64_t>(b.layout.total)}, 0,
                     8.0 * static_cast<double>(b.layout.total));
  float* send = send_.data() + b.all_begin;
  b.layout.pack(b.pieces, grads_, send);
  const auto mine = static_cast<size_t>(b.layout.counts[static_cast<size_t>(comm_.rank())]);
  b.op = comm_.start_reduce_scatter_sum(std::span<const float>(send, b.layout.total),
                                        std::span<float>(recv_.data() + b.mine_begin, mine),
                                        b.layout.counts,
                                        "gradient bucket " + std::to_string(&b - buckets_.data()));
}

void GradientReducer::gradients_final(int stage) {
  if (grads_ == nullptr) return;
  while (next_ < buckets_.size() && buckets_[next_].ready_stage <= stage) start(buckets_[next_++]);
  comm_.progress();
}

void GradientReducer::finish() {
  if (grads_ == nullptr) throw Error("internal: a gradient reduction finished before it began");
  while (next_ < buckets_.size()) start(buckets_[next_++]);
  for (Bucket& b : buckets_) comm_.wait(b.op);
  for (const Bucket& b : buckets_) {
    b.layout.unpack_part(b.pieces, recv_.data() + b.mine_begin, grads_, comm_.rank());
  }
  next_ = 0;
  grads_ = nullptr;
}

}  // namespace nanogpt
