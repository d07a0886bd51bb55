// The model's head as one operation: lm_head (z = x·Wᵀ), the logit soft-cap
// (y = softcap·σ(z / divisor)) and the cross-entropy over all V classes.
//
// The unfused head materializes T×V logits and as much again for their gradient (3.3 GB each
// for the speedrun's T = 16384, V = 50304). Here the rows are taken in gradient blocks of
// row_block rows, and each of those in logits blocks of logit_rows rows. A logits block's logits
// over the WHOLE vocabulary are computed with one GEMM into a workspace of logit_rows × V floats
// (rows padded to ld ≥ V, see below), small enough to stay in cache while each of its rows is
// then worked on in place by one thread: the soft-cap (the row keeps e = exp(-z/divisor), from
// which σ, y and dy/dz all follow), the max and Σ exp(y - max), the loss, and, in the backward,
// g = dL/dz into the gradient block (bf16 with bf16 products, the values those products would
// round it to). The backward then finishes each gradient block with two GEMMs on it: dx_block =
// g·W and dW += gᵀ·x_block. So a training step multiplies T×V×d three times (logits, dx, dW) and
// computes no logit twice. The logits' products all read one packed copy of W (the caller's
// W_packed, else packed once per call). The forward runs the same blocks and rows without the
// gradient, so the two return the same losses bit for bit.
//
// row_block is chosen so the gradient block stays under a bound (kMaxGradientBlockBytes, raised
// for large vocabularies, see there) with blocks of equal sizes, and logit_rows for the cache
// (kLogitsBlockBytes), unless FusedLossParams forces them: memory never grows with T.
//
// Memory a call uses (fused_linear_cross_entropy_workspace_bytes counts it), kept in the
// caller's Workspace (runtime/workspace.hpp) for later calls (grown, never shrunk, freed with the
// workspace): the logits, logit_rows × ld floats; in the backward, the gradient block, row_block ×
// ld values (bf16 with bf16 products, else fp32), and per thread two rows of V floats that the
// pass summing a row's exponentials keeps for its gradient; and 8 bytes of loss per row of a
// block. Filled on every call, in the caller's FusedLossBuffers if it gives one (kept for the
// next call), else for the call alone: W packed for the logits (V×d values, bf16 or fp32)
// unless the caller passed it packed; W packed again for dx's products when there is more than
// one row block (V×d values); with fp8, the rounded W (V×d floats; rounding per block instead
// would redo it for every row block) and the rounded rows of one block (row_block × d floats).
// Not counted: the GEMM's packing buffers, which it keeps in the same workspace for later calls:
// a packed copy of a product's whole A operand, for dx and dW the block's g (as large as the
// gradient block), and at most ~4 MiB of packed B. So O(V·d + row_block·(V + d)), and nothing
// of size T×V unless T <= row_block.
//
// Determinism: row blocks are visited in a fixed order, the GEMM splits work over output tiles
// only, and the elementwise work is split over rows, each row done whole by one thread; the
// results are bitwise identical for any thread count.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/matmul.hpp"

namespace nanogpt {

// The copies of W (and, with fp8, of x) a call makes and fills again on every call, for a
// caller that calls many times to keep: memory taken for one call comes from fresh pages, which
// the kernel faults in and zeroes one by one. The speedrun's FP8 head (V = 50304, d = 768: 154
// MB of rounded W, 77 MB for each packing) spent about 520 ms of a 5.37 s backward making them,
// 33 ms in memory kept from the call before (AMD EPYC Zen 4, 2 threads; bench/README.md). The
// model keeps one (GptT::loss_buffers()).
struct FusedLossBuffers {
  PackedB logits_w;              // W packed for the logits, unless the caller passed W_packed
  PackedB dx_w;                  // W packed for dx, with several row blocks
  AlignedBuffer w_e4m3, x_e4m3;  // with fp8: W (V × d) and a block's rows of x, rounded
  size_t bytes() const {
    return logits_w.bytes() + dx_w.bytes() + w_e4m3.capacity() + x_e4m3.capacity();
  }
};

struct FusedLossParams {
  int64_t T = 0, d = 0, V = 0;  // rows, model dim, classes (= padded vocab)
  const float* x = nullptr;     // [T, d]
  const float* W = nullptr;     // [V, d]
  // Optional: W packed for the logits' product, x·Wᵀ (pack_matmul_b(precision, Trans::kYes, d,
  // V, W, d, ...)), for callers that run the same W many times (decoding, evaluation): the
  // logits then skip packing it, with the same bits. Not used with fp8 (W is rounded first).
  const PackedB* W_packed = nullptr;
  // Optional: where the call makes its copies of W and x (see FusedLossBuffers); null: in
  // memory of the call's own. The same bits either way.
  FusedLossBuffers* buffers = nullptr;
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
  // Rows per gradient block, and rows of logits held at once (at most row_block); 0 picks them
  // from kMaxGradientBlockBytes and kLogitsBlockBytes. Tests set small values to get several
  // blocks and a ragged last one.
  int64_t row_block = 0;
  int64_t logit_rows = 0;
  // Post-training (src/posttrain/): the loss of row t is w_t·loss_t with loss_t = -log
  // softmax(y/τ)[target_t], τ the temperature the tokens were sampled at. row_weights (nullable:
  // all 1) may be negative (policy gradients) or 0 (masked tokens: no gradient); the calls
  // return Σ_t w_t·loss_t, the gradients are of loss_scale·Σ_t w_t·loss_t, and per_token still
  // receives the unweighted loss_t (so -per_token is the token's log-probability). With the
  // defaults the results are bit for bit those of the plain loss. capped_logits takes neither.
  const float* row_weights = nullptr;  // [T]
  float temperature = 1.0f;            // > 0
  // Optional output [T]: each row's entropy of softmax(y/τ), in nats (an extra pass per row).
  float* entropy = nullptr;
};

// How the rows per gradient block are chosen when row_block is left at 0. Every gradient block
// packs W (V×d) for dx and reads and writes dW once, whatever its height, so short blocks spend
// their time moving W and dW. Measured with fused_loss_bench (AMD EPYC, Zen 4, 2 threads, bf16,
// V = 50304, d = 768, T = 8192): 6.29 s with blocks of 432 rows, 5.42 s with 1024, 5.21 s with
// 2048 (peak extra memory 0.23, 0.63 and 1.04 GB). Earlier, fp32, T = 2048: 3.9 s at 158 rows,
// 2.9 s at 256, 2.5 s at 512, 2.2 s at 1024.
// So the gradient block may fill kMaxGradientBlockBytes, and more where that holds fewer than
// kMinLossRowBlock rows, up to kMaxRaisedWorkspaceBytes: V = 8192 fits 8176 rows of bf16
// gradients in 128 MiB (4088 in fp32); V = 50304 fits 1333 in bf16, and 666 in fp32, where the
// bound is raised to hold 1024 rows (206 MB). It never grows with T. The GEMM keeps a packed copy
// of g as large again (see the top of the file).
inline constexpr int64_t kMaxGradientBlockBytes = int64_t{128} << 20;
inline constexpr int64_t kMinLossRowBlock = 1024;
inline constexpr int64_t kMaxRaisedWorkspaceBytes = int64_t{512} << 20;

// How the rows per logits block are chosen when logit_rows is left at 0. The row passes read a
// block's logits right after its product wrote them, and then write its gradients: a block of
// kLogitsBlockBytes is still in the core's cache for them, where a block as tall as the gradient
// block went to memory and back (67 MB for 2,048 rows of V = 8192). Rows are rounded down to a
// whole number of the micro-kernel's tiles, and are at least kMinLogitRows. But every logits
// block reads all of W: when the packed W is larger than kCachedWeightBytes, it comes from
// memory each time, and a block takes at least kMinStreamedWeightLogitRows rows to share that,
// and enough rows that reading W costs at most half of what writing their logits does (2 × W's
// bytes / a row's logits bytes: d rows for a bf16 W, 2d for fp32).
// Measured (AMD EPYC Zen 5, 2 threads, bf16, W packed once per call; ms per backward call):
//   V = 8192, d = 256 (W 4 MB), T = 8192 in two gradient blocks: logits blocks of 36–72 rows
//   310–335, 96 and 128 rows 316–328, 24 rows 331–353; the previous one-block head 325–341 with
//   2,048-row blocks, 322–328 with 4,096.
//   V = 50304, d = 768 (W 77 MB), T = 2048: 32 rows 1,489, 64 rows 1,458, 128 to 1,024 rows
//   1,315–1,339; the previous head 1,323–1,329.
// On the AMX Xeon (lscpu model 167, 2 threads, 2026-12-05), the speedrun head (V = 50304, d =
// 768, bf16, fp8, T = 8192 in 7 gradient blocks of 1,171 rows; s per backward call, three calls
// at each size, sizes alternated): 128 rows 2.19–2.31, 512 rows 2.09–2.12, 768 rows 2.03–2.06,
// 1,171 rows 2.07–2.13. The logits of 768 rows take 154 MB, against 26 MB for 128.
// `evals run` (a forward of a packed W, cpu preset, ~1,200 rows a call) took 113–115 ms in blocks
// of 96 rows (3 MB), 117–122 in 192, 133–150 in one block of every row (39 MB).
inline constexpr int64_t kLogitsBlockBytes = int64_t{2} << 20;
inline constexpr int64_t kMinLogitRows = 32;
inline constexpr int64_t kCachedWeightBytes = int64_t{16} << 20;
inline constexpr int64_t kMinStreamedWeightLogitRows = 128;

// The rows per gradient block a call with these parameters uses: p.row_block if set (at most
// T), else the fewest blocks whose gradients fit the bound above, split evenly. 0 if T <= 0.
int64_t fused_linear_cross_entropy_row_block(const FusedLossParams& p);

// The rows per logits block: p.logit_rows if set, else as above (before rounding to the
// micro-kernel's tiles, which only lowers it); at most the gradient block. 0 if T <= 0.
int64_t fused_linear_cross_entropy_logit_rows(const FusedLossParams& p);

// The workspace bound the default row_block keeps to, in bytes (see kMinLossRowBlock).
int64_t fused_linear_cross_entropy_workspace_bound(const FusedLossParams& p);

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

// Bytes a backward uses besides the GEMM's packing buffers and W packed for the call (see the
// top of the file): logit_rows × ld floats of logits, row_block × (ld gradients (bf16 with bf16
// products, else fp32) + one double of loss), 2·V floats per thread of the current pool, plus
// with fp8 V×d + row_block×d floats. (A forward uses the logits and losses of these.)
size_t fused_linear_cross_entropy_workspace_bytes(const FusedLossParams& p);

}  // namespace nanogpt
