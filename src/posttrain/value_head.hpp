// PPO's value head (issue 18, item 6): V(h) = h·w + b on a final-norm row h of the policy (the
// lm_head's input at a position, GptT::final_norm()), a linear read-out of the trunk's features
// that predicts the return of the completion from that position on. Its own parameters (model_dim
// + 1 floats, float32 masters) and its own Adam; its loss reaches the trunk through the model
// hook (TokenLossT::final_norm_grad): dL/dh = dL/dV·w, scaled by the run's value coefficient.
//
// w = 0, b = 0 at the start, so the first values are exactly 0: the first batch's GAE advantages
// are then the plain (discounted) returns, with no noise from an untrained baseline, and the first
// update sends no value gradient into the trunk (dL/dh = dL/dV·w = 0), so a head that has seen no
// reward yet cannot disturb the policy's features. The head still learns from the first update
// on (dL/dw = Σ_t dL/dV_t·h_t is not 0).
//
// Saved as value_head.safetensors in the stage's checkpoints: "weight" [model_dim], "bias" [1]
// and their Adam moments ("weight.exp_avg", ...), with the Adam step count in the metadata, so
// `--resume` continues the head bit for bit.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "optim/adam.hpp"

namespace nanogpt {

class ValueHead {
 public:
  // torch.optim.Adam's defaults (β 0.9, 0.999, ε 1e-8), what PPO implementations (TRL, the
  // baselines) train their value function with; not the seed's (0.8, 0.95, 1e-10), which were
  // tuned for pre-training's embeddings and head.
  static constexpr AdamConfig kAdam{0.9, 0.999, 1e-8};
  static constexpr const char* kFileName = "value_head.safetensors";

  explicit ValueHead(int64_t model_dim);  // w = 0, b = 0, Adam's moments 0

  int64_t model_dim() const { return dim_; }
  std::span<const float> weight() const { return {params_.data(), static_cast<size_t>(dim_)}; }
  std::span<float> weight() { return {params_.data(), static_cast<size_t>(dim_)}; }
  float bias() const { return params_.back(); }
  void set_bias(float b) { params_.back() = b; }

  // V of one row (model_dim floats), accumulated in double.
  double value(const float* row) const;
  // V of every row of `rows`, [n, model_dim] row-major.
  std::vector<double> values(std::span<const float> rows) const;

  // The backward given dL/dV of a row h, in two halves because the trunk's half is needed
  // before the trunk's backward runs and the head's after its forward has made the row:
  //   feature_grad   writes scale·dL/dV·w to `out` (model_dim floats), the gradient of the row
  //                  the trunk gets (scale: the value coefficient; it depends on w, not on h);
  //   accumulate     adds dL/dV·h to dL/dw and dL/dV to dL/db (in double; zero_grads clears).
  void feature_grad(double grad_value, double scale, float* out) const;
  void accumulate(const float* row, double grad_value);
  void zero_grads();
  // dL/dw then dL/db, model_dim + 1 entries (writable: data-parallel ranks sum theirs).
  std::span<const double> grads() const { return grads_; }
  std::span<double> grads() { return grads_; }

  // One Adam step at learning rate lr (> 0) with the accumulated gradients; adam_steps() counts
  // them (the bias correction's step).
  void adam_step(double lr);
  int64_t adam_steps() const { return adam_steps_; }

  // The file's contents (what save writes); load reads a file a head of `model_dim` wrote, an
  // InputError naming it otherwise.
  std::string serialize() const;
  static ValueHead load(const std::string& path, int64_t model_dim);

 private:
  int64_t dim_;
  std::vector<float> params_;  // w (model_dim), then b
  std::vector<float> exp_avg_, exp_avg_sq_;
  std::vector<double> grads_;
  int64_t adam_steps_ = 0;
};

}  // namespace nanogpt
