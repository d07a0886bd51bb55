// The model's head as one operation: lm_head (z = x·Wᵀ), the logit soft-cap
// (y = softcap·σ(z / divisor)) and the cross-entropy over all V classes.
//
// The unfused head materializes T×V logits and as much again for their gradient (3.3 GB each
// for the speedrun's T = 16384, V = 50304). Here the vocabulary is swept in tiles of
// row_block × vocab_chunk logits: the forward keeps an online max and sum of exponentials per
// row and gathers the target's logit; the backward repeats that sweep for a row block, then
// sweeps again, recomputing each tile's logits to form g = dL/dz and accumulate dx (g·W) and
// dW (gᵀ·x) with the GEMM. Logits are never stored beyond one tile.
//
// Memory a call allocates (fused_linear_cross_entropy_workspace_bytes counts it):
//   one logits tile, row_block × vocab_chunk floats, and 20 bytes of row state per row of a block;
//   with fp8, the rounded W once per call (V×d floats; rounding per tile instead would redo it
//   for every row block) and the rounded rows of one block (row_block × d floats);
//   plus the GEMM's packing buffers (under 1 MB per thread).
// So O(V·d + row_block·(vocab_chunk + d)), and nothing of size T×V.
//
// Determinism: row blocks and vocabulary chunks are visited in a fixed order, the GEMM splits
// work over output tiles only, and the elementwise work is split over rows, each row done
// whole by one thread; the results are bitwise identical for any thread count.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/matmul.hpp"

namespace nanogpt {

struct FusedLossParams {
  int64_t T = 0, d = 0, V = 0;       // rows, model dim, classes (= padded vocab)
  const float* x = nullptr;          // [T, d]
  const float* W = nullptr;          // [V, d]
  const int32_t* targets = nullptr;  // [T], each in [0, V)
  // y = softcap·σ(z / softcap_divisor); softcap 0 turns the cap off (y = z, plain cross-entropy).
  float softcap = 30.0f;
  float softcap_divisor = 0.0f;  // 7.5·√d; 0 means "compute 7.5·√d"
  // FP8 head: x and W are rounded to E4M3 after dividing by x_scale / w_scale (as
  // round_to_e4m3(v·(1/scale))·scale, the convention of quantize_e4m3), and dL/dz, for the SUM
  // of the per-token losses, to E5M2 after dividing by grad_scale; products of the rounded
  // values accumulate in fp32.
  bool fp8 = false;
  float x_scale = 0, w_scale = 24.0f / 448.0f, grad_scale = 1.0f / 448.0f;  // x_scale 0 → √d/448
  float loss_scale = 1.0f;  // gradients are of loss_scale · Σ_t loss_t
  // bf16: the three products take bf16-rounded operands (fp32 accumulation); the soft-cap,
  // softmax statistics and loss stay fp32.
  Precision precision = Precision::kFp32;
  // Tile shape; 0 picks the defaults (kDefaultRowBlock × kDefaultVocabChunk).
  int64_t row_block = 0, vocab_chunk = 0;
};

// A 512 × 1024 tile is 2 MB of logits, the L2 of one core here; larger row blocks re-read W
// and dW (V×d each) fewer times, which matters more than the tile once the GEMM is fast.
inline constexpr int64_t kDefaultRowBlock = 512;
inline constexpr int64_t kDefaultVocabChunk = 1024;

// Σ_t loss_t in double; per_token (nullable) receives each loss_t.
double fused_linear_cross_entropy_forward(const FusedLossParams& p, float* per_token);

// Same return value as the forward, bit for bit; dx [T, d] is overwritten with
// d(loss_scale·Σloss)/dx and dW [V, d] is ACCUMULATED (+=). Either may be null to skip it.
double fused_linear_cross_entropy_backward(const FusedLossParams& p, float* dx, float* dW);

// The unfused computation: materializes the T×V logits and a T×V gradient, for tests and the
// benchmark. Same conventions as the backward (dx and dW nullable; neither → forward only).
double linear_cross_entropy_unfused(const FusedLossParams& p, float* dx, float* dW);

// Soft-capped logits for a few rows (sampling): out [T, V]. Honours fp8 like the other calls;
// the reference model evaluates without FP8, so samplers should leave it off. Targets unused.
void capped_logits(const FusedLossParams& p, float* out);

// Bytes the fused calls allocate besides the GEMM's packing buffers (see the top of the file).
size_t fused_linear_cross_entropy_workspace_bytes(const FusedLossParams& p);

}  // namespace nanogpt
