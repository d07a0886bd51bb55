// The outer loop of DiLoCo and Streaming DiLoCo (Douillard et al. 2025), over replicas that
// each train with the inner optimizer (GptOptimizer, data-parallel inside the replica) and meet
// only here.
//
// Every rank keeps θ_global and the outer momentum for its share of each fragment: the ranks
// of one replica split every fragment evenly (even_slice), and the replicas hold the same
// shares, so the outer state costs 8/G bytes per parameter on each of a replica's G ranks.
// For fragment p (fragment_plan.hpp) after inner step t:
//   start:    Δ = θ_global − θ_local on this rank's share, encoded at outer_grad_bits
//             (outer_grad_codec.hpp) and all-gathered across the replicas (the ranks with the
//             same index in every replica), while the inner steps go on;
//   complete: wait, decode every replica's Δ and sum them in float32 in replica order (the
//             same bits everywhere), average, and take the outer step, SGD with Nesterov
//             momentum as torch.optim.SGD(nesterov=True):  b ← μ·b + Δ;  θ_global ← θ_global −
//             lr·(Δ + μ·b);
//   merge:    at step t + τ, θ_local ← α·θ_local + (1 − α)·θ_global on the share, then
//             all-gathered inside the replica so its ranks agree again.
// Why an all-gather of encoded shares and not a reduction: a ring or tree all-reduce adds at
// every hop and would have to re-encode each partial sum to keep 4-bit traffic, losing
// precision M − 1 times; here each replica's Δ is rounded exactly once, by its sender, and the
// sum is exact float32 arithmetic in a fixed order. The price is (M − 1)·S bytes sent per rank
// instead of a reduce-scatter + all-gather's 2·(M − 1)/M·S: the same at M = 2, M/2 times more
// beyond (a reduce-scatter whose every hop decodes, adds in float32 and re-encodes only its
// own final shard would fix that; not needed at the replica counts of one CPU host).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "config/config.hpp"
#include "model/parameters.hpp"
#include "optim/fragment_plan.hpp"
#include "runtime/comm.hpp"

namespace nanogpt {

class StreamingDiloco {
 public:
  // `replica`: this replica's ranks (the inner optimizer's communicator); `across`: the ranks
  // with this rank's index in every replica. θ_global starts as `params`' values (the same in
  // every replica: the same seed).
  StreamingDiloco(const ParameterSet& params, const Config& config, Comm& replica, Comm& across);

  // After inner step `steps_done` (1-based): merges the fragments whose delay ends now, then
  // starts the fragments due now (with τ = 0, completes and merges them at once). Returns the
  // fragments it started.
  std::vector<int> after_inner_step(ParameterSet& params, int64_t steps_done);
  // The end of training: completes and merges what is in flight, then every fragment that
  // moved since its last sync takes the replicas' mean (θ_global − mean Δ: no outer learning
  // rate and no momentum, whose extrapolation from earlier, larger steps would overshoot when
  // the inner learning rate has cooled down to nearly zero), and every replica's parameters
  // become θ_global, so they end identical.
  void finish(ParameterSet& params, int64_t steps_done);

  // Checkpoints. settle() completes every outer step in flight (its merge stays scheduled), so
  // the state is θ_global, the momentum and the schedule, with nothing on the wire. The
  // tensors are whole (gathered inside the replica; a collective), named outer/global/NAME and
  // outer/momentum/NAME; the schedule is a JSON object.
  void settle();
  struct StateTensor {
    std::string name;
    std::vector<int64_t> shape;
    std::vector<float> data;
  };
  std::vector<StateTensor> export_state(const ParameterSet& params);
  std::vector<StateTensor> state_layout(const ParameterSet& params) const;
  void import_state(const std::vector<StateTensor>& state);
  std::string schedule_json() const;
  void set_schedule_json(const std::string& json);

  const std::vector<OuterFragment>& fragments() const { return plan_; }
  int replicas() const { return across_.size(); }
  // Bytes this rank sends when fragment p synchronizes (its encoded share to the other
  // replicas: (M − 1)·encoded bytes, as the ring all-gather sends).
  double sync_bytes(size_t p) const;
  // Bytes of outer state on this rank (θ_global, momentum) and of its send and receive buffers.
  size_t state_bytes() const;
  size_t buffer_bytes() const;

 private:
  struct Share {
    std::vector<ParamRun> runs;  // this rank's part of the fragment, as buffer runs
    size_t count = 0;
    size_t begin = 0;  // its position in the fragment's concatenation
    std::vector<float> global, momentum;
    std::vector<uint8_t> send, recv;  // encoded Δ: this rank's, every replica's
    std::vector<int> gather_counts;   // inside the replica, floats per rank
    Comm::OpId op = 0;
    bool in_flight = false, completed = false;
    bool averaging = false;  // the end-of-training sync: a plain mean, no outer step
    int64_t started_at = 0, merge_at = 0, last_start = 0;
  };

  void start(size_t p, const ParameterSet& params, int64_t steps_done);
  void complete(size_t p);
  void merge(size_t p, ParameterSet& params, double alpha);
  void pack(const Share& s, const float* params, float* out) const;

  Config config_;
  Comm& replica_;
  Comm& across_;
  int bits_ = 32;
  int64_t delay_ = 0;
  double alpha_ = 0;
  std::vector<OuterFragment> plan_;
  std::vector<Share> shares_;
  std::vector<float> scratch_, gathered_;
};

}  // namespace nanogpt
