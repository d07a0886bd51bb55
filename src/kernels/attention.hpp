// Causal attention with document masking and a sliding window, forward and backward.
//
// Token i sees token j iff j <= i, doc[i] == doc[j] and (i / block_size) - (j / block_size) <
// window_blocks. Scores are s_ij = scale·q_i·k_j. The kernels never build a T×T score matrix:
// they walk 64×64 tiles of queries × keys with an online softmax (flash-attention style), skip
// tiles the mask hides entirely, and so cost O(T·W) rather than O(T²). The backward recomputes
// the probabilities from q, k and the saved log-sum-exp instead of storing them.
//
// The tile products run on the GEMM micro-kernels (gemm/microkernel.hpp), called per tile on
// the worker: fp32 on active_microkernel(), bf16 on active_bf16_microkernel() (AMX where the
// CPU has it). In bf16, q, k, v, dO, P and dS are rounded to bf16 where they are packed as
// operands; the products accumulate in fp32, and the scores, the softmax statistics (max, sum,
// lse), Delta and the accumulators of out, dq, dk, dv stay fp32.
//
// Heads are processed in groups whose packed operands fit about one core's L2: each group's K
// and V (backward: q, k, v, dO in the roles they play) are packed once, then tasks run over
// (head, tile) pairs. Every output element is summed by one task in a fixed
// order, so results are bitwise identical whatever the thread count. Working memory is one
// group's packed operands, 2·T·D elements per head forward and 7·T·D backward (bf16 elements
// in bf16), kept by the calling thread for its next call.
#pragma once

#include <cstdint>

#include "kernels/matmul.hpp"

namespace nanogpt {

struct AttentionParams {
  int64_t T = 0;  // tokens (one sequence)
  int64_t H = 0;  // heads
  int64_t D = 0;  // head dim (128 in the speedrun; tests must also use small ones like 8, 16)
  // q, k, v: token t, head h, element e at ptr[t * ld + h * D + e]; the model passes slices of one
  // [T, 3·H·D] buffer, so ld = 3·H·D there.
  const float* q = nullptr;
  const float* k = nullptr;
  const float* v = nullptr;
  int64_t ld = 0;
  const int32_t* doc = nullptr;  // [T], nondecreasing
  int64_t window_blocks = 1;     // W
  int64_t block_size = 128;      // the mask's block granularity
  float scale = 0.12f;
  // kBf16: bf16 operands of the tile products (see above); the references ignore it.
  Precision precision = Precision::kFp32;
};

// out: [T, H·D] contiguous (token t, head h at out[t*H*D + h*D]); lse: [H, T] log-sum-exp of
// the scaled scores per query (saved for the backward).
void attention_forward(const AttentionParams& p, float* out, float* lse);

// dout like out. dq, dk, dv use the same layout and ld as q, k, v, and are OVERWRITTEN; only
// their D-element head slices are written, never the bytes between them.
void attention_backward(const AttentionParams& p, const float* out, const float* lse,
                        const float* dout, float* dq, float* dk, float* dv);

// Naive references (materialize scores row by row in double) for tests and debugging.
void attention_forward_reference(const AttentionParams& p, float* out, float* lse);
void attention_backward_reference(const AttentionParams& p, const float* dout, float* dq, float* dk,
                                  float* dv);

// Fraction of (query tile, key tile) pairs the kernels visit, out of all pairs of one head
// (cost ~ T·W): about one half for a single document with W >= T / block_size.
double attention_visited_fraction(const AttentionParams& p);

}  // namespace nanogpt
