// Causal attention with document masking and a sliding window, forward and backward.
//
// The query at position i sees the key at position j iff j <= i, doc[i] == doc[j] and
// (i / block_size) - (j / block_size) < window_blocks. Scores are s_ij = scale·q_i·k_j. The kernels
// never build a T×T score matrix: they walk 128×128 tiles of queries × keys (attention_mask.hpp)
// with an online softmax (flash-attention style), skip tiles the mask hides entirely, and so cost
// O(T·W) rather than O(T²). The backward recomputes the probabilities from q, k and the saved
// log-sum-exp instead of storing them.
//
// The tile products run on the GEMM micro-kernels (gemm/microkernel.hpp), called per tile on
// the worker: fp32 on active_microkernel(), bf16 on active_bf16_microkernel() (AMX where the
// CPU has it). In bf16, q, k, v, dO, P and dS are rounded to bf16 where they are packed as
// operands; the products accumulate in fp32, and the scores, the softmax statistics (max, sum,
// lse), Delta and the accumulators of out, dq, dk, dv stay fp32.
//
// Key/value heads are processed in groups whose packed operands fit about one core's L2: each
// group's K and V (backward: q, k, v, dO in the roles they play) are packed once, each K/V
// head once for all the query heads that read it, then tasks run over (head, tile) pairs.
// Every output element is summed by one task in a fixed order (dk, dv of a K/V head over its
// query heads in order), so results are bitwise identical whatever the thread count. Working
// memory is one group's packed operands, per K/V head 2·T_kv·D elements forward (fewer
// when decoding with a window: only the key tiles some query sees) and (3 + 4·H/H_kv)·T·D
// backward (bf16 elements in bf16), the calling thread's buffer in slot
// "attention.packed" of Workspace::current() (runtime/workspace.hpp), kept there for the next
// call and counted and released with that workspace. Bad parameters throw InputError.
#pragma once

#include <cstdint>

#include "kernels/matmul.hpp"

namespace nanogpt {

struct AttentionParams {
  int64_t T = 0;     // queries
  int64_t T_kv = 0;  // key/value positions (0: T); at least T
  int64_t H = 0;     // query heads
  int64_t H_kv = 0;  // key/value heads (0: H); must divide H
  int64_t D = 0;     // head dim (128 in the speedrun; tests must also use small ones like 8, 16)
  // The queries are the last T of the T_kv positions: query i is at position T_kv − T + i (in
  // training T_kv = T; in decoding T new tokens meet a K/V cache of T_kv − T past ones). Query
  // head h reads key/value head h / (H / H_kv) (grouped-query attention; H_kv = 1 is
  // multi-query).
  // q: query i, head h, element e at q[i·ld_q + h·D + e]; k, v: position j, key/value head g at
  // k[j·ld_kv + g·D + e]. ld_q and ld_kv default (when 0) to ld, for callers whose q, k and v
  // are slices of one [T, (H + 2·H_kv)·D] buffer, as in training.
  const float* q = nullptr;
  const float* k = nullptr;
  const float* v = nullptr;
  int64_t ld = 0;
  int64_t ld_q = 0;
  int64_t ld_kv = 0;
  // With bf16 products, q, k and v may be given stored in bf16 (all three or none, in the
  // layouts of q, k, v): the kernels' packers read these, half the bytes, and pack the same
  // operands as from q, k, v (which they round), so q, k and v may then be null. The one-query
  // path (decoding) and the references read q, k, v only.
  const bf16* q_bf16 = nullptr;
  const bf16* k_bf16 = nullptr;
  const bf16* v_bf16 = nullptr;
  const int32_t* doc = nullptr;  // [T_kv], nondecreasing: the document of each position
  int64_t window_blocks = 1;     // W
  int64_t block_size = 128;      // the mask's block granularity
  float scale = 0.12f;
  // kBf16: bf16 operands of the tile products (see above); the references ignore it.
  Precision precision = Precision::kFp32;
};

// out: [T, H·D] contiguous (query i, head h at out[i*H*D + h*D]); lse: [H, T] log-sum-exp of
// the scaled scores per query (saved for the backward). out_rounded, where set: out rounded to
// bf16 as well, in out's layout, written as each tile of out is (for a bf16 product that reads
// its A rows in place: the output projection, which would otherwise pack and round out). With
// out_rounded, out may be null: only the rounded rows are written.
void attention_forward(const AttentionParams& p, float* out, float* lse,
                       bf16* out_rounded = nullptr);

// dout like out. dq, dk, dv use the layouts of q, k, v (dq: H heads with ld_q; dk, dv: H_kv
// heads with ld_kv, each the sum over the query heads of its group) and are OVERWRITTEN; only
// their D-element head slices are written, never the bytes between them. Requires T_kv == T
// (training; decoding has no backward). With bf16 products dout may be given stored in bf16
// instead (dout_bf16, dout then null): its packers and Delta read it, the same bits as from
// dout, which they would round. Likewise out, which only Delta = Σ dO·O reads, may be given as
// the forward's rounded copy (out_bf16, out then null), as flash attention's backward reads the
// output it stored: Delta then sums the rounded values (not the bits of fp32 out; the same as
// an fp32 out holding them).
void attention_backward(const AttentionParams& p, const float* out, const float* lse,
                        const float* dout, float* dq, float* dk, float* dv,
                        const bf16* dout_bf16 = nullptr, const bf16* out_bf16 = nullptr);

// Naive references (materialize scores row by row in double) for tests and debugging.
void attention_forward_reference(const AttentionParams& p, float* out, float* lse);
void attention_backward_reference(const AttentionParams& p, const float* dout, float* dq, float* dk,
                                  float* dv);

// Fraction of (query tile, key tile) pairs the kernels visit, out of all pairs of one query head
// (cost ~ T·W): about one half for a single document with W >= T / block_size.
double attention_visited_fraction(const AttentionParams& p);

// (query, key) pairs the mask leaves visible, per query head: what the kernels' products do
// useful work on (the profiler's FLOPs per call). Documents count here, unlike
// model/flop_count's pairs of one sequence.
int64_t attention_visible_pairs(const AttentionParams& p);

// Whether attention_backward keeps the score gradients (dS) its dK/dV pass computes, for dQ, or
// recomputes P and dS for dQ: they are kept where one key tile's, for a K/V head's query heads,
// fit the stored-gradient budget (set_attention_stored_gradient_budget, attention_internal.hpp),
// the key tiles taken in chunks that fit it. The same bits either way; model/flop_count counts
// the recomputation from it.
bool attention_backward_keeps_score_gradients(const AttentionParams& p);

}  // namespace nanogpt
