// Data-parallel gradient reduction overlapped with the backward, as the seed's bucketed
// all-reduce: the pieces of shard_plan.hpp are grouped into buckets of about bucket_mb MiB in
// the order the backward finalises them, and a bucket's reduction starts as soon as the
// backward's stage has finalised all of its pieces, while the backward goes on with the layers
// below. Each bucket is one reduce-scatter in rank-major layout, which delivers to each rank
// only the summed gradients of its own pieces (the Adam slices it updates, the Muon matrices it
// orthogonalises): (N-1)/N of the bucket's bytes sent per rank, half of what an all-reduce that
// hands every gradient to every rank sends.
#pragma once

#include <cstddef>
#include <span>
#include <vector>

#include "model/backward_listener.hpp"
#include "optim/shard_plan.hpp"
#include "runtime/aligned_memory.hpp"
#include "runtime/comm.hpp"

namespace nanogpt {

class GradientReducer final : public BackwardListener {
 public:
  struct Bucket {
    std::vector<ShardPiece> pieces;
    RankMajorLayout layout;
    int ready_stage = 0;    // the backward stage after which all its pieces are final
    size_t all_begin = 0;   // its region of the send buffer (layout.total floats)
    size_t mine_begin = 0;  // and of the receive buffer (this rank's count)
    Comm::OpId op = 0;
  };

  // `tensor_ready_stage`: per parameter tensor, the stage after which its gradient is final
  // (GptT::gradient_ready_stages()).
  GradientReducer(std::vector<ShardPiece> pieces, std::span<const int> tensor_ready_stage,
                  double bucket_mb, Comm& comm);

  // The buckets every rank of `ranks` forms (the same on all): the pieces in the order the
  // backward finalises them (by ready stage; within one, later in the buffer first), cut into
  // runs of at most bucket_mb MiB (a piece larger than that is a bucket alone), each laid out
  // rank-major, with its send and receive regions for rank `rank`.
  static std::vector<Bucket> plan(std::vector<ShardPiece> pieces,
                                  std::span<const int> tensor_ready_stage, double bucket_mb,
                                  int ranks, int rank);

  // The backward that finishes the step's gradients (its last micro-batch) is about to run and
  // will accumulate into `grads`.
  void begin(float* grads);
  // Starts, in bucket order, every bucket whose pieces are all final.
  void gradients_final(int stage) override;
  // Starts what has not started, waits for every bucket, and writes this rank's summed pieces
  // into the gradient buffer (the other ranks' pieces there are left as they were: partial).
  void finish();

  const std::vector<Bucket>& buckets() const { return buckets_; }
  // The send buffer (every gradient, packed) and the receive buffer (this rank's pieces).
  size_t buffer_bytes() const { return (send_.capacity() + recv_.capacity()) * sizeof(float); }

 private:
  void start(Bucket& b);

  Comm& comm_;
  std::vector<Bucket> buckets_;
  AlignedVector<float> send_, recv_;
  float* grads_ = nullptr;
  size_t next_ = 0;  // first bucket not started
};

}  // namespace nanogpt
