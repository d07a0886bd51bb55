// GEMM micro-kernels and the packers that feed them. A micro-kernel computes one MR×NR tile
//   acc[MR×NR] (= or +=) Σ_k a_k ⊗ b_k
// over kc values of k from one packed A micro-panel and one packed B micro-panel, into an fp32
// accumulator (row-major, ld_acc). The driver later finishes the tile into C (alpha, beta,
// epilogue). Accumulating onto acc continues the same fp32 sum in the same order, so the
// result does not depend on how K is blocked. One implementation per ISA, each in its own
// file, compiled with that ISA's target attribute; each file makes its MicroKernel, the entry
// that carries everything the driver needs of it (tile shape, packed layouts, packers, finish,
// default cache blocking, what the CPU must have), and the kernel table
// (microkernel_dispatch.cpp) lists the entries that dispatch chooses among at run time.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "kernels/gemm.hpp"
#include "kernels/gemm/isa.hpp"
#include "kernels/gemm/layout.hpp"

namespace nanogpt {

using MicroKernelFn = void (*)(int64_t kc, const void* a, const void* b, float* acc, int64_t ld_acc,
                               bool accumulate);

// What a finishing kernel (below) writes: C[0:rows, 0:cols] = alpha·acc + beta·C (beta == 0
// never reads C) + addend_scale·addend (addend null: nothing added; GemmEpilogue's addend at
// this tile), with the arithmetic of the kernel's FinishFn.
struct TileFinish {
  float alpha = 1.0f, beta = 0.0f;
  float* c = nullptr;
  int64_t ldc = 0, rows = 0, cols = 0;
  const float* addend = nullptr;
  int64_t ld_addend = 0;
  float addend_scale = 0.0f;
};

// The micro-kernel's sum, then the tile finished from the registers as `finish` says, so the
// same bits as storing the sum and finishing it, without storing the accumulator and reading it
// back. For a tile's last K block when the product's epilogue is at most an addend; `acc` is
// only read (when accumulate is set). A is a packed micro-panel when lda_bytes is 0, else whole
// rows read in place as fn_a_rows reads them (only for a kernel that has fn_a_rows).
using MicroKernelFinishingFn = void (*)(int64_t kc, const void* a, int64_t lda_bytes, const void* b,
                                        const float* acc, int64_t ld_acc, bool accumulate,
                                        const TileFinish& finish);

// The micro-kernel with A's micro-panel read where A is stored instead of packed: mr rows of
// bf16, k contiguous, rows lda_bytes apart, kc values from `a` on (for a kernel that can read
// each k step's rows as they are stored: AMX's tiles load them, AVX512-BF16 broadcasts each
// pair). Same arithmetic in the same order as fn on the packed panel, so the same bits.
using MicroKernelRowsAFn = void (*)(int64_t kc, const void* a, int64_t lda_bytes, const void* b,
                                    float* acc, int64_t ld_acc, bool accumulate);

// The micro-kernel storing the tile's sum straight into C (rows ldc apart) instead of into acc,
// for a whole tile's last K block where finishing would copy the sum unchanged (alpha 1, beta 0,
// no epilogue, C not streamed): the bits of fn then finish, without the sum's round trip through
// memory. The carried sum is read from acc when `accumulate` is set. A is a packed micro-panel
// when lda_bytes is 0, else whole rows read in place as fn_a_rows reads them.
using MicroKernelToCFn = void (*)(int64_t kc, const void* a, int64_t lda_bytes, const void* b,
                                  const float* acc, int64_t ld_acc, bool accumulate, float* c,
                                  int64_t ldc);

// What a packer reads and how it rounds: fp32 kept, fp32 rounded to bf16 (nearest even), bf16.
enum class PackSource { kF32 = 0, kF32ToBf16 = 1, kBf16 = 2 };

// How each operand of a product is read: usually both alike (a single PackSource converts);
// the fused loss multiplies its gradient, stored as bf16, by weights stored as fp32.
struct PackSources {
  PackSource a, b;
  PackSources(PackSource both) : a(both), b(both) {}  // NOLINT: one source for both is the rule
  PackSources(PackSource a_source, PackSource b_source) : a(a_source), b(b_source) {}
};

// Packs rows [first, first + valid) of Y into one micro-panel of `panel` rows (rows past
// `valid` zero) and k in [0, k_valid) (zero up to kp). For A, Y = op(A); for B, Y = op(B)ᵀ,
// so a micro-panel of B is a run of columns. Y[i][k] is src[i·ld + k] when trans is kNo,
// src[k·ld + i] otherwise. out is where the micro-panel starts in the packed buffer.
using PanelPackFn = void (*)(const void* src, int64_t ld, Trans trans, int64_t first, int64_t valid,
                             int64_t k_valid, int64_t kp, void* out);

// Packs `panels` consecutive micro-panels of A: rows [first, first + valid) of Y and k in
// [0, k_valid) as PanelPackFn does (the panels' other rows and k up to kp zero), panel g at
// out + g·panel_bytes, from a source contiguous in i (Y[i][k] = src[k·ld + i]). Bit for bit what
// the kernel's PanelPackFn writes panel by panel; it reads a cache line of each source row at a
// time across the panels the line spans, where one panel at a time reads a part of each line
// (a few values of k rows far apart) per panel.
using PanelsAcrossPackFn = void (*)(const void* src, int64_t ld, int64_t first, int64_t valid,
                                    int64_t k_valid, int64_t kp, int64_t panels, void* out,
                                    int64_t panel_bytes);

// C[0:rows, 0:cols] = alpha·acc + beta·C (beta == 0 never reads C), then the epilogue's
// outputs at the same coordinates; row, col are the tile's position in C for those.
using FinishFn = void (*)(const float* acc, int64_t ld_acc, int64_t rows, int64_t cols, float alpha,
                          float beta, float* c, int64_t ldc, const GemmEpilogue* ep, int64_t row,
                          int64_t col);

using LayoutFn = layout::Layout (*)(int64_t rows, int64_t k);

// A kernel's packers for one operand, indexed by PackSource; null where it cannot read that
// source. fp32 kernels take pack::fp32_pack_table (pack.hpp).
using PackTable = std::array<PanelPackFn, 3>;
using AcrossPackTable = std::array<PanelsAcrossPackFn, 3>;

// The driver's cache blocking, as a value the autotuner can choose (gemm/blocking.hpp).
struct GemmBlocking {
  int64_t mc = 0;  // rows of C per task: a multiple of the kernel's mr
  int64_t nc = 0;  // columns of C per task: a multiple of nr; the unit of work handed out
  int64_t kc = 0;  // depth of one micro-kernel call: a multiple of k_step (0: all of K)
  // Above 0: mc is M split into this many row blocks of equal height (rounded up to mr),
  // whatever M the blocking is fitted to (normalized(), gemm/blocking.hpp); mc is then unused.
  int64_t row_parts = 0;
  std::string name() const;  // "mc128_nc256_kc512", or "rows4_nc256_kc512" with row_parts 4
  bool operator==(const GemmBlocking&) const = default;
};

struct MicroKernel {
  const char* isa;  // the kernel's name: "scalar", "avx2", "avx512", "avx512_bf16", "amx"
  int64_t mr, nr;
  MicroKernelFn fn;
  IsaLevel level = IsaLevel::kScalar;
  int64_t k_step = 1;          // packed k is padded to a multiple of this
  int64_t packed_bytes = 4;    // of one packed element: 4 (fp32) or 2 (bf16)
  bool bf16_products = false;  // consumes bf16 operands natively (vs fp32 ones rounded)
  // Packed layouts: A as (rows, k), B as (k, cols); extents are multiples of mr, nr, k_step.
  LayoutFn a_layout = nullptr;
  LayoutFn b_layout = nullptr;  // called as (k, cols)
  PackTable pack_a = {};
  PackTable pack_b = {};
  // Optional, by PackSource: pack_a for runs of consecutive panels from a source contiguous in i
  // (a weight gradient's dYᵀ, the head's Gᵀ, attention's P, Pᵀ and dSᵀ); null: pack_a panel by
  // panel (pack_panels.hpp, TileGemm::pack_a).
  AcrossPackTable pack_a_across = {};
  FinishFn finish = nullptr;
  // Optional: fn and finish in one call (above), for a tile's last K block whose epilogue is at
  // most an addend.
  MicroKernelFinishingFn fn_finishing = nullptr;
  // Optional: fn reading whole micro-panels of a bf16, k-contiguous A in place (above); the
  // driver uses it where K is a multiple of k_step and packs only a last, partial panel.
  MicroKernelRowsAFn fn_a_rows = nullptr;
  // Optional: the sum stored into C itself where finishing would only copy it (above).
  MicroKernelToCFn fn_to_c = nullptr;
  // Optional: finish with non-temporal stores (epilogue.hpp, stream_tile_avx512), for large C.
  FinishFn stream = nullptr;
  // Per-thread set-up before the first micro-kernel call of a task and clean-up after its
  // last (AMX: load and release the tile configuration, which is per thread).
  void (*begin_task)() = nullptr;
  void (*end_task)() = nullptr;
  // The cache blocking to start from, sized for this kernel's tile and operand bytes
  // (default_blocking adapts it to the problem and thread count; the autotuner varies it).
  GemmBlocking blocking = {96, 256, 256};
  // Whether this CPU (and OS) can run the kernel and its packers and finish; null: any x86-64.
  bool (*runnable)() = nullptr;
};

MicroKernel microkernel_scalar();
MicroKernel microkernel_avx2();
MicroKernel microkernel_avx512();
MicroKernel microkernel_avx512_bf16();
MicroKernel microkernel_amx();
// For tests on CPUs without AMX: the AMX kernel's own code, packers and layouts on a software
// model of the tile unit (microkernel_amx.cpp). Needs AVX-512 BW, VL and BF16 for its packers.
MicroKernel microkernel_amx_emulated();

// Dispatch, over the kernel table:
// The fp32 kernel in use: the best one at or below isa_cap() (an error if NANOGPT_ISA names an
// ISA the CPU lacks).
const MicroKernel& active_microkernel();
// For tests: every fp32 kernel this CPU can run.
std::vector<MicroKernel> available_microkernels();

// The bf16 kernel in use: AMX at `amx`, AVX512-BF16 at `avx512` when the CPU has it, otherwise
// the fp32 kernel of the level on operands rounded to bf16 (bf16×bf16 products are exact in
// fp32, so those agree with the reference as closely as the native ones).
const MicroKernel& active_bf16_microkernel();
// Every bf16 kernel this CPU can run, native and fallback.
std::vector<MicroKernel> available_bf16_microkernels();
// The bf16 kernel chosen for a given cap (the rule above).
MicroKernel bf16_microkernel_for(IsaLevel cap);
MicroKernel fp32_microkernel_for(IsaLevel cap);

}  // namespace nanogpt
