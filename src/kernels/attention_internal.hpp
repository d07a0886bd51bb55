// The attention kernels on a chosen GEMM micro-kernel. attention_forward/backward use the
// active one for the precision (fp32: active_microkernel(); bf16: active_bf16_microkernel());
// these let tests run every kernel the CPU has, whatever NANOGPT_ISA says, including the ones
// whose mr does not divide a tile. The kernel must be able to pack the precision's operands
// (fp32 kept, or fp32 rounded to bf16), else Error.
#pragma once

#include <cstdint>

#include "kernels/attention.hpp"

namespace nanogpt {

struct MicroKernel;

void attention_forward_with(const MicroKernel& kernel, const AttentionParams& p, float* out,
                            float* lse, bf16* out_rounded = nullptr);
void attention_backward_with(const MicroKernel& kernel, const AttentionParams& p, const float* out,
                             const float* lse, const float* dout, float* dq, float* dk, float* dv,
                             const bf16* dout_bf16 = nullptr, const bf16* out_bf16 = nullptr);

// The forward of exactly one query (T = 1: decoding a token over a cache) without the tile
// products: attention_decode.cpp. attention_forward takes it for every single query; within fp32
// rounding of attention_forward_with on any kernel. Writes out, out_rounded (its rows rounded
// to bf16) or both, as attention_forward does.
void attention_forward_one_query(const AttentionParams& p, float* out, float* lse,
                                 bf16* out_rounded = nullptr);

// Bytes of packed operands one group of heads may take (2 MiB unless set); returns the previous
// value. Heads are packed and processed group by group; a budget below one head's operands
// gives every head a group of its own. Results do not depend on it.
int64_t set_attention_packed_budget(int64_t bytes);

// Bytes of score gradients (dS, packed for dQ = dS·K) the backward may keep at once (64 MiB
// unless set); returns the previous value. The tasks that own a key tile keep the dS tiles they
// compute and the tasks that own a query tile read them, instead of recomputing P and dS (two
// of their three products per tile, and the exponentials): key tiles are taken in chunks whose
// blocks fit the budget, and a group of heads has no more K/V heads than it holds one key tile's
// blocks of. Where even that does not fit, the query-tile tasks recompute. Results do not
// depend on it.
int64_t set_attention_stored_gradient_budget(int64_t bytes);
int64_t stored_score_gradient_budget();

// The most bytes of dS one key tile's task keeps for one K/V head (all its query heads) on this
// kernel: the backward keeps dS where this fits stored_score_gradient_budget().
int64_t score_gradient_bytes_per_key_tile(const MicroKernel& kernel, const AttentionParams& p);

}  // namespace nanogpt
