// The element-wise work of the attention kernels on one tile of scores, between the tile
// products: the online softmax (forward), the probabilities and their gradients (backward),
// and Delta = dO·O. Loops compiled once per ISA (target_clones) and written so they vectorize;
// the clone is chosen once per process, so every call of a run computes alike.
#pragma once

#include <cstdint>
#include <limits>

namespace nanogpt {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// A forward score tile, transposed: s[j·kBq + q] is the raw score of query q and key j, for
// keys j < nk and queries q < nq, and query q sees keys [lo[q], hi[q]) (all nk when `full`).
// Runs the online softmax over it: leaves p = exp(scale·s − m_new) there (0 where hidden),
// updates each query's running max m and sum l, and sets alpha[q], the factor its output row
// must be scaled by. With queries along the vector lanes, the max and the sum are plain
// lane-wise updates in key order, so there are no horizontal reductions and the rounding of a
// sum depends on the tile alone; masking by range rather than by writing -inf first saves a
// pass. Lanes are worked in whole vectors up to nq rounded to 16; past nq their values mean
// nothing.
void online_softmax_tile(float* s, int64_t nk, int64_t nq, const int32_t* lo, const int32_t* hi,
                         bool full, float scale, float* m, float* l, float* alpha);

// Row i of o[rows × n] *= alpha[i], skipping the rows whose max did not grow.
void scale_rows(float* o, int64_t rows, int64_t n, const float* alpha);

// A backward tile, s[i·kBk + j] for query i < nq and key j (the row holds kBk keys, those of
// the tile and padding the products ignore): s holds raw scores and dp holds dP = dO·Vᵀ.
// Leaves P (0 outside [lo[i], hi[i])) in s and dS = scale·P∘(dP − Delta) in dp (0 there too,
// whatever dp held: the score products leave hidden micro-tiles out, TileGemm::product).
void probs_and_grads_tile(float* s, float* dp, int64_t nq, const int32_t* lo, const int32_t* hi,
                          float scale, const float* lse, const float* delta);

// The two above as loops compiled once per ISA (target_clones), which CPUs without AVX-512 run;
// with it, intrinsics with the same bits (attention_tile_math.cpp) run instead, and the tests
// compare the two.
void online_softmax_tile_portable(float* s, int64_t nk, int64_t nq, const int32_t* lo,
                                  const int32_t* hi, bool full, float scale, float* m, float* l,
                                  float* alpha);
void probs_and_grads_tile_portable(float* s, float* dp, int64_t nq, const int32_t* lo,
                                   const int32_t* hi, float scale, const float* lse,
                                   const float* delta);

// dst = src rounded to bf16 exactly as the packers round (kernels/bf16.hpp: nearest even,
// denormals flushed to a zero of their sign), as fp32. In bf16, dP is computed from dO as the
// packers round it, and Delta must be the same dO's product for each row of dS to sum to zero
// as it should (it halves the error of dq and dk).
void round_row_to_bf16(const float* src, int64_t n, float* dst);

}  // namespace nanogpt
