// The seed's optimizer setup over a model's parameter groups: Muon for the hidden matrices
// (qkv_w as three matrices, a stack of experts' matrices as one per expert), Adam for lm_head,
// the embeddings, the scalars and the MoE routers; every learning rate follows the same
// multiplier schedule, and Muon's momentum warms up. With matrix_optimizer "adam" the hidden
// matrices are Adam's too (at adam_matrix_lr), each one Adam tensor like any other, so they
// are checkpointed as Adam moments and sharded as Adam slices.
//
// Data-parallel (a Comm of N > 1 ranks): the work and the state are sharded as shard_plan.hpp
// says. The gradients reach each rank through the GradientReducer, overlapped with the
// backward (begin_gradient_reduction); each rank then updates its Adam slices and
// orthogonalises its Muon matrices, and the updated parameters are all-gathered: first the
// Adam slices, then the Muon matrices in rounds of N·threads (one per thread of every rank),
// each round's gather overlapping the next round's Newton–Schulz, as in the seed.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "config/config.hpp"
#include "model/backward_listener.hpp"
#include "model/parameters.hpp"
#include "optim/gradient_reducer.hpp"
#include "optim/newton_schulz.hpp"
#include "optim/shard_plan.hpp"
#include "runtime/aligned_memory.hpp"
#include "runtime/comm.hpp"
#include "runtime/thread_pool.hpp"
#include "runtime/workspace.hpp"

namespace nanogpt {

// Whether Muon updates `t`: a hidden matrix under matrix_optimizer "muon". Everything else
// is Adam's.
bool updated_by_muon(const ParamTensor& t, const Config& config);

class GptOptimizer {
 public:
  // `precision`: the arithmetic of Newton–Schulz's products, the model's (Gpt::precision()),
  // as the seed runs Newton–Schulz in bf16 where the model multiplies in bf16.
  // `comm`: the ranks that train together (a world of one: single-process). With more than one,
  // `ready_stages` gives each parameter's backward stage (GptT::gradient_ready_stages()), for
  // the gradient buckets; every rank constructs its optimizer at the same point (a collective).
  GptOptimizer(const ParameterSet& params, const Config& config, Precision precision,
               Comm& comm = Comm::local(), std::span<const int> ready_stages = {});

  // Data-parallel: the backward about to run (the step's last micro-batch) finishes the
  // gradients in `grads`; the returned listener, passed to it, sends them as they become final.
  // nullptr in a world of one.
  BackwardListener* begin_gradient_reduction(float* grads);

  // Applies one update for training step `step` (0-based) of config.num_iterations, on
  // ThreadPool::current(). Bitwise the same for any number of threads. Data-parallel: finishes
  // the reduction begun above (if none was begun, `grads` must already hold the summed
  // gradients on every rank), updates this rank's share and gathers the parameters, so every
  // rank ends with the same parameters; each Muon matrix's update is bitwise the one a single
  // process computes from the same gradient.
  void step(ParameterSet& params, std::span<float> grads, int64_t step);

  // State for checkpoints: one tensor per (kind, parameter), e.g. "adam_exp_avg/lm_head.weight",
  // whole whatever the number of ranks (export_state gathers it: a collective), so checkpoints
  // are the same files for any N, and import_state keeps this rank's share of each.
  struct StateTensor {
    std::string name;
    std::vector<int64_t> shape;
    std::vector<float> data;
  };
  std::vector<StateTensor> export_state();
  void import_state(const std::vector<StateTensor>& state);
  // Names and shapes of export_state's tensors (data empty), without communicating.
  std::vector<StateTensor> state_layout() const;
  int64_t adam_steps() const { return adam_steps_; }
  void set_adam_steps(int64_t n) { adam_steps_ = n; }

  // Memory the optimizer holds: its state (Muon's momentum, 4 bytes per matrix weight; Adam's
  // two moments, 8 bytes per other weight; each 1/N of that on N ranks), Newton–Schulz's
  // scratch (per pool thread, sized for the largest matrix), the workspace its products'
  // kernels keep their scratch in (installed around every matrix's update, on whichever thread
  // runs it; freed with it), and data-parallel communication buffers (the gradient buckets'
  // send and receive buffers, the parameter gather's).
  size_t state_bytes() const;
  size_t newton_schulz_bytes() const;
  size_t communication_bytes() const;
  const Workspace& workspace() const { return *workspace_; }
  const GradientReducer* gradient_reducer() const { return reducer_.get(); }
  Comm& comm() const { return *comm_; }
  // Which rank owns each Muon matrix and Adam slice.
  const std::vector<ShardPiece>& shard_pieces() const { return pieces_; }

 private:
  struct Slot {
    const ParamTensor* param = nullptr;
    SliceRange adam_slice;                   // Adam: the elements this rank updates
    std::vector<float> exp_avg, exp_avg_sq;  // Adam: their moments
    double base_lr = 0;
  };
  // One Muon matrix: a whole kMatrix parameter, or one [R, C] slice of a stacked one.
  struct MuonMatrix {
    size_t slot = 0;     // in slots_
    int64_t offset = 0;  // of the matrix in its parameter
    int64_t rows = 0, cols = 0;
    double work = 0;              // Newton–Schulz FLOPs: what the matrix costs, for scheduling
    int owner = 0;                // the rank that orthogonalises it
    std::vector<float> momentum;  // Muon's buffer, on the owner only
  };
  // One all-gather of updated parameters: its pieces, their layout, and where its packed
  // parameters live in gather_all_ (every rank's) and gather_send_ (this rank's).
  struct GatherRound {
    std::vector<ShardPiece> pieces;
    RankMajorLayout layout;
    size_t all_begin = 0, mine_begin = 0;
    std::vector<size_t> matrices;  // Muon rounds: this rank's matrices (indices into muon_)
  };
  // What one pool worker needs to run matrices as single-threaded tasks: a 1-thread pool
  // (no threads of its own) installed around each task so the task's GEMMs and element-wise
  // loops stay on the worker, and its own Newton–Schulz scratch.
  struct MuonWorker {
    ThreadPool serial{1};
    NewtonSchulzWorkspace ns;
  };

  void muon_matrix(MuonMatrix& m, ParameterSet& params, std::span<const float> grads, double mult,
                   double momentum, NewtonSchulzWorkspace& ws);
  void adam_slices(ParameterSet& params, std::span<const float> grads, double mult);
  void ensure_workers(int threads);
  void step_local(ParameterSet& params, std::span<const float> grads, double mult, double momentum);
  void step_sharded(ParameterSet& params, std::span<float> grads, double mult, double momentum);
  void plan_shards(std::span<const int> ready_stages);
  Comm::OpId start_gather(GatherRound& round, const ParameterSet& params);

  Config config_;
  Comm* comm_;
  int rank_ = 0, ranks_ = 1;
  Precision precision_;
  std::vector<Slot> slots_;
  std::vector<MuonMatrix> muon_;                      // largest first
  std::vector<double> muon_work_;                     // their costs, in that order
  std::vector<std::unique_ptr<MuonWorker>> workers_;  // grown to the pool's size, then kept
  // Data-parallel only:
  std::vector<ShardPiece> pieces_;            // every Adam slice and Muon matrix, by owner
  std::unique_ptr<GradientReducer> reducer_;  // the gradients' buckets
  bool reduction_begun_ = false;
  std::vector<GatherRound> rounds_;                // Adam's slices, then Muon's rounds
  AlignedVector<float> gather_all_, gather_send_;  // the parameter gather's buffers
  // Held by pointer so the optimizer stays movable (a Workspace is not).
  std::unique_ptr<Workspace> workspace_ = std::make_unique<Workspace>("optimizer");
  int64_t adam_steps_ = 0;
};

// Newton–Schulz FLOPs of one optimizer step: every Muon matrix of a model with this
// configuration (qkv_w as three), muon_ns_steps iterations each; 0 with matrix_optimizer adam.
double muon_newton_schulz_flops(const Config& config);

// How many of the leading matrices (costs `work`, largest first) Muon runs one at a time on
// all `threads` before the rest run as single-threaded tasks; see gpt_optimizer.cpp.
size_t muon_matrices_on_whole_pool(const std::vector<double>& work, int threads);

}  // namespace nanogpt
