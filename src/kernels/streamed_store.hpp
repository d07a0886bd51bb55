// Stores around the caches (non-temporal), for rows written once and read by a later pass
// only, after the caches have moved on: their lines are then not read in before they are
// written (write-allocate), which costs as much memory traffic as the writes themselves.
// Where the CPU has AVX-512 the whole 64-byte lines (32-byte for bf16) of the output go
// around the caches and the few values before the first and after the last go through them;
// elsewhere all are plain stores. The values are those of the plain forms, bit for bit.
// The stores are weakly ordered: call streamed_stores_fence() after the last of them, before
// another thread may read the output (a pool task's end).
#pragma once

#include <cstdint>

#include "kernels/bf16.hpp"

namespace nanogpt {

// out[i] = x[i] for n floats.
void copy_streamed(const float* x, int64_t n, float* out);

// out[i] = to_bf16(x[i]), as round_to_bf16. qk_norm.rotary.v_mix.bwd's dqkv, 12.5 MB per call
// on the cpu preset: 151.9 → 143.2 ms per 4 steps (medians), faster in 8 of 8 pairs (Zen 5,
// bench/README.md, 2026-12-06).
void round_to_bf16_streamed(const float* x, int64_t n, bf16* out);

void streamed_stores_fence();

}  // namespace nanogpt
