// Token permutation for a mixture of experts: tokens routed top-k are stacked in expert order
// for the grouped GEMM (kernels/grouped_gemm.hpp) and their outputs are brought back, weighted.
// Nothing is sized tokens × experts: the plan is two maps of tokens·k entries and the offsets.
//
// A token t's k choices are its slots s = 0..k−1, entry t·k + s of the routing arrays. The
// plan sorts the entries by expert with a stable counting sort, so within an expert the rows
// come in token order (then slot order), and everything below sums in a fixed order: the
// results are bitwise identical whatever the number of threads.
#pragma once

#include <cstdint>
#include <vector>

namespace nanogpt {

struct MoePlan {
  int64_t tokens = 0, experts = 0, top_k = 0;
  // experts + 1 entries: expert e's rows are [offsets[e], offsets[e+1]) of the expert-ordered
  // matrices (the grouped GEMM's GroupOffsets); offsets[e+1] − offsets[e] is its token count.
  std::vector<int64_t> offsets;
  // For each expert-ordered row r, the routing entry t·k + s it holds (its token is entry / k).
  std::vector<int64_t> entry_of_row;
  // For each routing entry t·k + s, its row in expert order (the inverse of entry_of_row).
  std::vector<int64_t> row_of_entry;

  int64_t rows() const { return tokens * top_k; }
};

// The plan for `tokens` tokens each sent to top_k experts: expert_ids[t·top_k + s] in
// [0, experts). A token may name an expert twice (it then gets two rows there). Throws
// InputError on a count below 1 (tokens may be 0), top_k > experts, or an id out of range.
MoePlan plan_moe_routing(int64_t tokens, int64_t experts, int64_t top_k, const int32_t* expert_ids);

// Xe[r, :] = X[token of row r, :] for every expert-ordered row r: the grouped GEMM's input.
// X is tokens × d (ldx), Xe is rows() × d (tight).
void moe_gather(const MoePlan& plan, int64_t d, const float* X, int64_t ldx, float* Xe);

// Its backward: dX[t, :] (= or, with accumulate, +=) Σ_s dXe[row of (t, s), :], s in order.
void moe_gather_backward(const MoePlan& plan, int64_t d, const float* dXe, float* dX, int64_t ldx,
                         bool accumulate);

// Y[t, :] (= or +=) Σ_s weights[t·k + s]·Ye[row of (t, s), :], s in order: the experts'
// outputs (rows() × d, tight) brought back to their tokens, scaled by the routing weights.
void moe_combine(const MoePlan& plan, int64_t d, const float* Ye, const float* weights, float* Y,
                 int64_t ldy, bool accumulate);

// Its backward, given dY (tokens × d, ldy): dYe[row of (t, s), :] = weights[t·k + s]·dY[t, :]
// and dweights[t·k + s] = Σ_j dY[t, j]·Ye[row of (t, s), j] (summed in double, j in order).
void moe_combine_backward(const MoePlan& plan, int64_t d, const float* dY, int64_t ldy,
                          const float* Ye, const float* weights, float* dYe, float* dweights);

}  // namespace nanogpt
