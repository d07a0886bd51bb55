// The model's head as one operation: lm_head (z = x·Wᵀ), the logit soft-cap
// (y = softcap·σ(z / divisor)) and the cross-entropy over all V classes.
//
// The unfused head materializes T×V logits and as much again for their gradient (3.3 GB each
// for the speedrun's T = 16384, V = 50304). Here the rows are taken in blocks of row_block, and
// a block's logits over the WHOLE vocabulary are computed once, with one GEMM, into a workspace
// of row_block × V floats (rows padded to ld ≥ V, see below). Each row of it is then worked on in
// place by one thread: the soft-cap (the row keeps e = exp(-z/divisor), from which σ, y and dy/dz
// all follow), the max and Σ exp(y - max), the loss, and, in the backward, g = dL/dz. The backward
// then finishes the block with two GEMMs on the workspace: dx_block = g·W and dW += gᵀ·x_block. So
// a training step multiplies T×V×d three times (logits, dx, dW) and computes no logit twice. The
// forward runs the same blocks and rows without the gradient, so the two return the same losses bit
// for bit.
//
// row_block is chosen so the workspace stays under a bound (kMaxLogitsWorkspaceBytes, raised for
// large vocabularies, see there) with blocks of equal sizes, unless FusedLossParams::row_block
// forces it: memory never grows with T.
//
// Memory a call uses (fused_linear_cross_entropy_workspace_bytes counts it):
//   the logits workspace, row_block × ld floats (ld: V rounded up to an odd number of 64-byte
//   lines, so that reading it down a column does not hit a few cache sets only), kept in the
//   caller's Workspace (runtime/workspace.hpp) for later calls (grown, never shrunk, freed with
//   the workspace), with bf16 products as many bf16 for the rows' gradients (kept the same way),
//   and 8 bytes of loss per row of a block;
//   with fp8, the rounded W once per call (V×d floats; rounding per block instead would redo it
//   for every row block) and the rounded rows of one block (row_block × d floats).
// Not counted: the GEMM's packing buffers, which it keeps in the same workspace for later calls:
// a packed copy of a product's whole A operand, for dx and dW the block's g (as large as the
// workspace), and at most ~4 MiB of packed B.
// So O(V·d + row_block·(V + d)), and nothing of size T×V unless T <= row_block.
//
// Determinism: row blocks are visited in a fixed order, the GEMM splits work over output tiles
// only, and the elementwise work is split over rows, each row done whole by one thread; the
// results are bitwise identical for any thread count.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/matmul.hpp"

namespace nanogpt {

struct FusedLossParams {
  int64_t T = 0, d = 0, V = 0;  // rows, model dim, classes (= padded vocab)
  const float* x = nullptr;     // [T, d]
  const float* W = nullptr;     // [V, d]
  // Optional: W packed for the logits' product, x·Wᵀ (pack_matmul_b(precision, Trans::kYes, d,
  // V, W, d, ...)), for callers that run the same W many times (decoding, evaluation): the
  // logits then skip packing it, with the same bits. Not used with fp8 (W is rounded first).
  const PackedB* W_packed = nullptr;
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
  // Rows whose logits are held at once; 0 picks them from kMaxLogitsWorkspaceBytes. Tests set
  // small values to get several blocks and a ragged last one.
  int64_t row_block = 0;
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

// How the rows per block are chosen when row_block is left at 0. Rows per block are what the
// speed depends on: every block packs W (V×d) twice for the GEMM (the logits' and dx's operand)
// and reads and writes dW once, whatever its height, so short blocks spend their time moving W
// and dW. Measured with fused_loss_bench (AMD EPYC, Zen 4, 2 threads, bf16, V = 50304, d = 768,
// T = 8192): 6.29 s with blocks of 432 rows, 5.42 s with 1024, 5.21 s with 2048 (peak extra
// memory 0.23, 0.63 and 1.04 GB). Earlier, fp32, T = 2048: 3.9 s at 158 rows, 2.9 s at 256,
// 2.5 s at 512, 2.2 s at 1024.
// So the workspace (logits, and bf16 gradients in bf16 runs) may fill kMaxLogitsWorkspaceBytes,
// and more where that holds fewer than kMinLossRowBlock rows, up to kMaxRaisedWorkspaceBytes:
// V = 8192 fits 4088 rows of fp32 logits in 128 MiB (the cpu preset's T = 4096 is two blocks at
// most), V = 50304 gets 1024 rows (206 MB in fp32, 309 MB in bf16). It never grows with T.
// The GEMM keeps a packed copy of g as large again (see the top of the file).
inline constexpr int64_t kMaxLogitsWorkspaceBytes = int64_t{128} << 20;
inline constexpr int64_t kMinLossRowBlock = 1024;
inline constexpr int64_t kMaxRaisedWorkspaceBytes = int64_t{512} << 20;

// A forward of a pre-packed W (FusedLossParams::W_packed: the scorers' and samplers' head)
// moves no W per block, the cost the bound above amortizes, so its blocks are sized for the
// cache instead: the pass over each row's logits then reads them while the product's writes are
// still cached, not back from memory. kForwardLogitsBytes of logits per block, at least
// kMinForwardRowBlock rows (the micro-kernel's tiles stay full), at most the default's. Measured
// (`evals run` on a 100-case fortunes-choice suite, cpu preset V = 8192, 7 calls of ~1,200 rows;
// AMD EPYC Zen 5, 2 threads, bf16): the head took 133–150 ms in one block of every row (39 MB of
// logits), 113–115 ms in blocks of 96 rows (3 MB), 117–122 ms of 192, 127–130 ms of 384.
inline constexpr int64_t kForwardLogitsBytes = int64_t{4} << 20;
inline constexpr int64_t kMinForwardRowBlock = 32;

// The rows per block a call with these parameters uses: p.row_block if set (at most T), else
// the fewest blocks whose workspace fits the bound above, split evenly (for a forward of a
// packed W, gradients = false: the fewest that fit kForwardLogitsBytes). 0 if T <= 0.
int64_t fused_linear_cross_entropy_row_block(const FusedLossParams& p, bool gradients = true);

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

// Bytes the fused calls use besides the GEMM's packing buffers (see the top of the file):
// row_block × (ld floats of logits (and ld bf16 gradients with bf16 products) + one double of
// loss), plus with fp8 V×d + row_block×d floats.
size_t fused_linear_cross_entropy_workspace_bytes(const FusedLossParams& p);

}  // namespace nanogpt
