// The seed's optimizer setup over a model's parameter groups: Muon for the hidden matrices
// (qkv_w as three matrices), Adam for lm_head, the embeddings and the scalars; every learning
// rate follows the same multiplier schedule, and Muon's momentum warms up.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/config.hpp"
#include "model/parameters.hpp"
#include "optim/newton_schulz.hpp"

namespace nanogpt {

class GptOptimizer {
 public:
  GptOptimizer(const ParameterSet& params, const Config& config);

  // Applies one update for training step `step` (0-based) of config.num_iterations.
  void step(ParameterSet& params, const std::vector<float>& grads, int64_t step);

  // State for checkpoints: one tensor per (kind, parameter), e.g. "adam_exp_avg/lm_head.weight".
  struct StateTensor {
    std::string name;
    std::vector<int64_t> shape;
    std::vector<float>* data;
  };
  std::vector<StateTensor> state_tensors();
  int64_t adam_steps() const { return adam_steps_; }
  void set_adam_steps(int64_t n) { adam_steps_ = n; }

 private:
  struct Slot {
    const ParamTensor* param = nullptr;
    std::vector<float> muon_buffer;          // Muon
    std::vector<float> exp_avg, exp_avg_sq;  // Adam
    double base_lr = 0;
  };
  Config config_;
  std::vector<Slot> slots_;
  int64_t adam_steps_ = 0;
  NewtonSchulzWorkspace ns_;
};

}  // namespace nanogpt
