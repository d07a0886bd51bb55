// Products of one tile of tokens by the head dimension on a chosen GEMM micro-kernel, as
// attention runs them: operands packed once into the kernel's own panels, then the kernel run
// over a block of micro-tiles at a time, on the calling thread (no driver, no blocking: a tile
// is small and the caller owns the parallel loop).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "kernels/bf16.hpp"
#include "kernels/gemm.hpp"
#include "kernels/gemm/microkernel.hpp"
#include "kernels/matmul.hpp"
#include "runtime/integer_math.hpp"

namespace nanogpt {

// The shapes of packed operand blocks, each one tile of `tile` tokens (64 in attention) by the
// head dimension D. A blocks are tile rows by D as k (attention: K, Q, dO as the left side of
// K·Qᵀ, Q·Kᵀ, dO·Vᵀ) or by tile tokens as k (P, Pᵀ, dS, dSᵀ); B blocks are tile columns by D
// as k (Q, K, V as the right side of those score products), or D as columns by tile tokens as
// k (V, dO, Q, K as the right side of P·V, Pᵀ·dO, dSᵀ·Q, dS·K).
enum class Block { kRowsByD, kRowsByTile, kTileByD, kDByTile };

// Where a tile straddles the causal diagonal, key kj of the tile is hidden from query qi when
// kj > qi + delta, delta the query tile's first position minus the key tile's first (0 on the
// diagonal). A product told so skips what only hidden pairs make: which of its dimensions hold
// the keys and the queries says what that is.
enum class CausalAxes {
  kKeysByQueries,    // rows keys, columns queries (the forward's scores, K·Qᵀ)
  kQueriesByKeys,    // rows queries, columns keys (the backward's scores Q·Kᵀ and dO·Vᵀ)
  kQueriesOverKeys,  // rows queries, k keys (P·V, dS·K)
  kKeysOverQueries,  // rows keys, k queries (Pᵀ·dO, dSᵀ·Q)
};
struct CausalSkip {
  CausalAxes axes;
  int64_t delta;
};

// The tile products of one call, on one micro-kernel: packing into its panels and running it
// over a block of micro-tiles. A block's micro-panels are located through the kernel's own
// layouts once, here, and every micro-panel is packed starting at k = 0, so the kernel can be
// run over a prefix of k (a partial tile's tokens).
class TileGemm {
 public:
  // Error unless the kernel packs the precision's operands (fp32 kept, or fp32 rounded to bf16)
  // and its nr and k step divide the tile, so tiles need no padding as columns or as k.
  TileGemm(const MicroKernel& kernel, Precision precision, int64_t tile, int64_t D);

  // Bytes of a packed block, rounded up to a cache line.
  int64_t bytes(Block b) const { return round_up(size_[static_cast<int>(b)], 64); }
  int64_t rows() const { return rows_; }  // of an A block: tile padded to mr
  int64_t dn() const { return dn_; }      // D padded to nr: the row length of accumulators
  int64_t dk() const { return dk_; }      // D padded to the k step
  int64_t k_steps(int64_t k) const { return round_up(k, ks_); }

  // An A block of `valid` rows of Y (Y[i][k] = src[i·ld + k], or src[k·ld + i] transposed) and
  // k_valid values of k: only what a product may read of it, the micro-panels holding those
  // rows (rows past `valid` in the last one zero) over k_steps(k_valid) values of k (zero past
  // k_valid). The rest of the block is not written: a tile of a few tokens (a short prompt,
  // a choice scored over a cache) would otherwise pack mostly zeros, several times its data.
  void pack_a(const float* src, int64_t ld, Trans trans, int64_t valid, int64_t k_valid, Block b,
              std::byte* out) const;

  // A B block seen as its columns: `valid` rows of Y = op(B)ᵀ, as for pack_a.
  void pack_b(const float* src, int64_t ld, Trans trans, int64_t valid, int64_t k_valid, Block b,
              std::byte* out) const;

  // The same from operands already stored in bf16 (bf16 products only): the bytes packing their
  // fp32 originals writes, from half the bytes read (operands read from memory: attention's
  // q, k and v in bf16 training). Error with fp32 products.
  void pack_a(const bf16* src, int64_t ld, Trans trans, int64_t valid, int64_t k_valid, Block b,
              std::byte* out) const;
  void pack_b(const bf16* src, int64_t ld, Trans trans, int64_t valid, int64_t k_valid, Block b,
              std::byte* out) const;

  // c[0:rows, 0:cols] (+)= A·B over the first kc values of k, rows and cols rounded up to
  // whole micro-tiles (c must have room for them). Reads only what the packers wrote when rows
  // and cols are at most the blocks' `valid` and kc at most k_steps of their k_valid.
  // Given `skip` (the causal rule hides part of the tile), micro-tiles of scores that only
  // hidden pairs make are not computed (their part of c keeps what it held: the caller's masks
  // must not read it), and a product over keys stops each row block's k at the last key its
  // queries see, and one over queries starts it at the first query its keys are seen by (the
  // pairs outside have P or dS exactly zero, which adds nothing). Blocks' layouts must be
  // separable (every kernel's are) for a product over queries to start past k = 0.
  void product(int64_t rows, int64_t cols, int64_t kc, const std::byte* a, Block ba,
               const std::byte* b, Block bb, float* c, int64_t ldc, bool accumulate,
               const CausalSkip* skip = nullptr) const;

  // dst[0:rows, 0:cols] = alpha·acc[0:rows, 0:cols], for an output this call writes once and
  // a later pass reads: with non-temporal stores where the kernel has them (MicroKernel::stream)
  // and dst's rows start on cache lines, so the destination's lines are not read in first;
  // else plain stores. The same bits either way.
  void store(const float* acc, int64_t ld_acc, int64_t rows, int64_t cols, float alpha, float* dst,
             int64_t ld) const;

  // The rows of c a product of `rows` rows writes: rounded up to the micro-tile.
  int64_t rows_written(int64_t rows) const { return round_up(rows, mr_); }

  void begin_task() const {
    if (kernel_.begin_task != nullptr) kernel_.begin_task();
  }
  void end_task() const {
    if (kernel_.end_task != nullptr) kernel_.end_task();
  }

 private:
  // The packers for one source (PackSource): source_ for fp32 operands, kBf16 for bf16 ones.
  struct Packers {
    PanelPackFn a = nullptr, b = nullptr;
    PanelsAcrossPackFn a_across = nullptr;  // or null (MicroKernel::pack_a_across)
  };
  void pack_a_with(const Packers& with, const void* src, int64_t ld, Trans trans, int64_t valid,
                   int64_t k_valid, Block b, std::byte* out) const;
  void pack_b_with(const Packers& with, const void* src, int64_t ld, Trans trans, int64_t valid,
                   int64_t k_valid, Block b, std::byte* out) const;

  std::vector<int64_t>& offsets(Block b) { return offsets_[static_cast<int>(b)]; }
  const std::vector<int64_t>& offsets(Block b) const { return offsets_[static_cast<int>(b)]; }

  const MicroKernel& kernel_;
  PackSource source_;
  int64_t mr_, nr_, ks_, bytes_;
  Packers from_f32_;   // the precision's fp32 packers (kept, or rounded to bf16)
  Packers from_bf16_;  // with bf16 products; all null with fp32 ones
  int64_t tile_, rows_, dk_, dn_;
  std::vector<int64_t> offsets_[4];  // bytes from a block's start to each micro-panel
  layout::Layout layouts_[4];        // each block's layout (kRowsBy*: A's, k·By*: B's)
  bool evenly_spaced_[4] = {true, true, true, true};  // offsets_[b] steps by one stride
  int64_t size_[4] = {};
};

// Calls begin_task/end_task around one task's products (AMX: the tile configuration is per
// thread, and released tiles cost nothing at a context switch).
class TaskScope {
 public:
  explicit TaskScope(const TileGemm& g) : g_(g) { g_.begin_task(); }
  ~TaskScope() { g_.end_task(); }
  TaskScope(const TaskScope&) = delete;
  TaskScope& operator=(const TaskScope&) = delete;

 private:
  const TileGemm& g_;
};

}  // namespace nanogpt
