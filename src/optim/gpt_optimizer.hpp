// The seed's optimizer setup over a model's parameter groups: Muon for the hidden matrices
// (qkv_w as three matrices, a stack of experts' matrices as one per expert), Adam for lm_head,
// the embeddings, the scalars and the MoE routers; every learning rate follows the same
// multiplier schedule, and Muon's momentum warms up.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "config/config.hpp"
#include "model/parameters.hpp"
#include "optim/newton_schulz.hpp"
#include "runtime/thread_pool.hpp"
#include "runtime/workspace.hpp"

namespace nanogpt {

class GptOptimizer {
 public:
  // `precision`: the arithmetic of Newton–Schulz's products, the model's (Gpt::precision()),
  // as the seed runs Newton–Schulz in bf16 where the model multiplies in bf16.
  GptOptimizer(const ParameterSet& params, const Config& config, Precision precision);

  // Applies one update for training step `step` (0-based) of config.num_iterations, on
  // ThreadPool::current(). Bitwise the same for any number of threads.
  void step(ParameterSet& params, std::span<const float> grads, int64_t step);

  // State for checkpoints: one tensor per (kind, parameter), e.g. "adam_exp_avg/lm_head.weight".
  struct StateTensor {
    std::string name;
    std::vector<int64_t> shape;
    std::vector<float>* data;
  };
  std::vector<StateTensor> state_tensors();
  int64_t adam_steps() const { return adam_steps_; }
  void set_adam_steps(int64_t n) { adam_steps_ = n; }

  // Memory the optimizer holds: its state (Muon's momentum, 4 bytes per matrix weight; Adam's
  // two moments, 8 bytes per other weight), Newton–Schulz's scratch (per pool thread, sized
  // for the largest matrix), and the workspace its products' kernels keep their scratch in
  // (installed around every matrix's update, on whichever thread runs it; freed with it).
  size_t state_bytes() const;
  size_t newton_schulz_bytes() const;
  const Workspace& workspace() const { return *workspace_; }

 private:
  struct Slot {
    const ParamTensor* param = nullptr;
    std::vector<float> muon_buffer;          // Muon
    std::vector<float> exp_avg, exp_avg_sq;  // Adam
    double base_lr = 0;
  };
  // One Muon matrix: a whole kMatrix parameter, or one [R, C] slice of a stacked one.
  struct MuonMatrix {
    size_t slot = 0;     // in slots_
    int64_t offset = 0;  // of the matrix in its parameter
    int64_t rows = 0, cols = 0;
    double work = 0;  // Newton–Schulz FLOPs: what the matrix costs, for scheduling
  };
  // What one pool worker needs to run matrices as single-threaded tasks: a 1-thread pool
  // (no threads of its own) installed around each task so the task's GEMMs and element-wise
  // loops stay on the worker, and its own Newton–Schulz scratch.
  struct MuonWorker {
    ThreadPool serial{1};
    NewtonSchulzWorkspace ns;
  };

  void muon_matrix(const MuonMatrix& m, ParameterSet& params, std::span<const float> grads,
                   double mult, double momentum, NewtonSchulzWorkspace& ws);

  Config config_;
  Precision precision_;
  std::vector<Slot> slots_;
  std::vector<MuonMatrix> muon_;                      // largest first
  std::vector<double> muon_work_;                     // their costs, in that order
  std::vector<std::unique_ptr<MuonWorker>> workers_;  // grown to the pool's size, then kept
  // Held by pointer so the optimizer stays movable (a Workspace is not).
  std::unique_ptr<Workspace> workspace_ = std::make_unique<Workspace>("optimizer");
  int64_t adam_steps_ = 0;
};

// Newton–Schulz FLOPs of one optimizer step: every Muon matrix of a model with this
// configuration (qkv_w as three), muon_ns_steps iterations each.
double muon_newton_schulz_flops(const Config& config);

// How many of the leading matrices (costs `work`, largest first) Muon runs one at a time on
// all `threads` before the rest run as single-threaded tasks; see gpt_optimizer.cpp.
size_t muon_matrices_on_whole_pool(const std::vector<double>& work, int threads);

}  // namespace nanogpt
