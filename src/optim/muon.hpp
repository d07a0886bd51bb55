// Muon (MomentUm Orthogonalized by Newton–Schulz, https://kellerjordan.github.io/posts/muon/):
// SGD with Nesterov momentum whose update is replaced by its Newton–Schulz orthogonalization,
// so every direction of a hidden matrix moves by about the same amount. Used for every matrix
// of the transformer blocks; embeddings, lm_head and scalars use Adam.
#pragma once

#include <cstdint>

#include "optim/newton_schulz.hpp"

namespace nanogpt {

// The seed's hyperparameters. Real values are double, like the run Config, because the
// reference does its scalar arithmetic in Python floats; they are rounded to float only where
// they meet a tensor.
struct MuonConfig {
  double lr = 0.05;
  double momentum_start = 0.85, momentum_end = 0.95;  // linear warm-up, see muon_momentum()
  int64_t momentum_warmup_steps = 300;
  int ns_steps = 5;
  bool nesterov = true;
};

// One Muon step on one rows×cols matrix (p, g and buf all rows×cols, row-major):
//   buf = m·buf + (1−m)·g
//   u   = (1−m)·g + m·buf            (Nesterov; u = buf without it)
//   p  -= lr·√max(1, rows/cols) · newton_schulz5(u)
// The √(rows/cols) factor keeps the per-element update size of a tall matrix comparable to a
// wide one's. `g` is only read. buf must start at zero (the reference's zeros_like state).
//
// Orthogonalization is per matrix: a stacked weight such as qkv_w [3, H·hd, d] is three
// independent calls, one per [H·hd, d] slice (pointer + i·H·hd·d), exactly as the reference
// treats q, k and v as separate parameters.
//
// Bitwise independent of the number of threads in ThreadPool::current().
void muon_update(float* p, const float* g, float* buf, int64_t rows, int64_t cols, double lr,
                 double momentum, int ns_steps, NewtonSchulzWorkspace& ws, bool nesterov = true);

}  // namespace nanogpt
