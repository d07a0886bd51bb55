// Adam, for the parameters Muon does not suit: lm_head, the embeddings and the scalars. It
// reproduces torch.optim.Adam (torch 1.13, single-tensor, no weight decay, no amsgrad)
// operation by operation in fp32, so a run can be compared with the reference step by step.
#pragma once

#include <cstdint>

namespace nanogpt {

// The seed's values. double, like the run Config, because torch does its scalar arithmetic
// (1 − β, β^step, the bias corrections) in Python floats; rounding β to float first would move
// 1 − β by an ulp.
struct AdamConfig {
  double beta1 = 0.8;
  double beta2 = 0.95;
  double eps = 1e-10;
};

// One step on n elements; `step` counts from 1 (the first update is step 1). exp_avg and
// exp_avg_sq must start at zero. As torch computes it:
//   exp_avg    = β1·exp_avg + (1−β1)·g
//   exp_avg_sq = β2·exp_avg_sq + (1−β2)·g·g
//   p         += −(lr / (1 − β1^step)) · exp_avg / (√exp_avg_sq / √(1 − β2^step) + eps)
// Bitwise independent of the number of threads in ThreadPool::current().
void adam_update(float* p, const float* g, float* exp_avg, float* exp_avg_sq, int64_t n, double lr,
                 const AdamConfig& config, int64_t step);

}  // namespace nanogpt
