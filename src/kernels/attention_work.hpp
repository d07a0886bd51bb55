// How the attention kernels divide their work: heads in groups whose packed operands fit a
// budget, each operand of a group carved from one workspace in blocks of a tile of tokens, and
// the tasks of a parallel loop ordered by cost. None of it changes a result.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <span>
#include <vector>

#include "kernels/gemm/tile_gemm.hpp"

namespace nanogpt {

// Packed operands stay in the caches while their heads are worked on only if they are not too
// many: heads are processed in groups whose packed operands take about this much (at least one
// head), about one core's L2 here. At T = 1024, D = 128 that is one head per group backward
// and two (fp32) or four (bf16) forward. Measured single-threaded on the speedrun shape, one
// head per group beat all six at once by 4-10% backward; with two threads the difference was
// within the noise. This is how many heads of bytes_per_head each make a group under that
// budget (set_attention_packed_budget), from 1 to H.
int64_t heads_per_group(int64_t bytes_per_head, int64_t H);

// The calling thread's buffer for packed operands, slot "attention.packed" of
// Workspace::current() (the model's workspace in a run, counted and released with it), kept
// across calls so that each call does not fault its pages in again. Call it on the calling
// thread, before the parallel loops: workers use the pointer, never the workspace.
std::byte* packing_workspace(int64_t bytes);

// Each pool worker's tile buffers for one call (scores, probabilities, accumulators): arrays of
// the given byte sizes, each 64-byte aligned, carved from the worker's lane of slot
// "attention.tiles" of Workspace::current(), so they are counted with the model's workspace
// and kept for the next call instead of allocated (and the scores zeroed) at every call. Made on
// the calling thread, before the parallel loops. The lanes are zeroed when they grow; later
// calls find the previous call's values, as a worker's later tasks in one call always did.
class TileScratch {
 public:
  TileScratch(std::initializer_list<int64_t> bytes, int workers);
  std::byte* bytes(int worker, size_t array) const {
    return lanes_[static_cast<size_t>(worker)] + offsets_[array];
  }
  float* floats(int worker, size_t array) const {
    return reinterpret_cast<float*>(bytes(worker, array));
  }

 private:
  std::vector<int64_t> offsets_;
  std::span<std::byte* const> lanes_;
};

// One operand of the heads [h0, h0 + heads) of a group, packed in blocks of one tile of tokens,
// tiles [t0, t0 + nt): block (h, t) at ((h − h0)·nt + t − t0)·block_bytes. Carved from the
// workspace at *offset, which it advances.
struct Packed {
  std::byte* base;
  int64_t block_bytes, t0, nt, h0;
  Packed(const TileGemm& g, Block b, int64_t first_tile, int64_t n_tiles, int64_t first_head,
         int64_t heads, std::byte* workspace, int64_t* offset)
      : base(workspace + *offset),
        block_bytes(g.bytes(b)),
        t0(first_tile),
        nt(n_tiles),
        h0(first_head) {
    *offset += heads * nt * block_bytes;
  }
  std::byte* at(int64_t h, int64_t t) const {
    return base + ((h - h0) * nt + t - t0) * block_bytes;
  }
};

// One of q, k, v as the packers read it: from its bf16 rows where the caller stored them
// (AttentionParams::q_bf16, …; the same packed bytes from half the bytes read), else from its
// fp32 values. `at` counts elements from the start of either.
struct OperandRows {
  const float* values;
  const bf16* rounded;
  void pack_a(const TileGemm& g, int64_t at, int64_t ld, Trans trans, int64_t valid,
              int64_t k_valid, Block b, std::byte* out) const {
    if (rounded != nullptr) {
      g.pack_a(rounded + at, ld, trans, valid, k_valid, b, out);
    } else {
      g.pack_a(values + at, ld, trans, valid, k_valid, b, out);
    }
  }
  void pack_b(const TileGemm& g, int64_t at, int64_t ld, Trans trans, int64_t valid,
              int64_t k_valid, Block b, std::byte* out) const {
    if (rounded != nullptr) {
      g.pack_b(rounded + at, ld, trans, valid, k_valid, b, out);
    } else {
      g.pack_b(values + at, ld, trans, valid, k_valid, b, out);
    }
  }
};

// Tasks by key/value head, and within one in decreasing cost, so the tasks left for the end of
// the loop are short, and the threads work on the same packed operands. The order changes no
// result: each task computes its outputs alone.
struct Task {
  int64_t cost, tile;
  int64_t h;   // the query head (a key-tile task: the key/value head)
  int64_t kv;  // the key/value head whose operands it reads
  int kind;    // backward: 0 owns a key tile (dK, dV), 1 a query tile (dQ)
};

void sort_tasks(std::vector<Task>& tasks);

}  // namespace nanogpt
