// Which keys a query may see, written once: the rule pair by pair, and the tile geometry the
// kernels walk, derived from it. The kernels, the references and attention_visited_fraction all
// ask this; tests/test_attention_mask.cpp checks the tile geometry against the rule.
//
// The query at position i sees the key at position j iff j <= i, doc[i] == doc[j] and
// i / block_size − j / block_size < window_blocks (attention.hpp). Queries are the last T of
// the T_kv positions: query index q is at position T_kv − T + q. Docs are nondecreasing, so the
// keys a query sees are one contiguous range [first_visible(i), i], and whether a whole tile is
// visible or hidden is decided by its corner tokens.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "kernels/attention.hpp"

namespace nanogpt {

// Tiles of kBq queries × kBk keys. 128 is the speedrun's mask block, so a tile never straddles a
// block boundary and most tiles are either fully visible or skipped; other block sizes still
// work, they just take the elementwise-mask path more often. 128 is also a multiple of every
// micro-kernel's nr (8 to 32) and of the k step (1, 2 or 32), so key tiles need no padding as
// columns or as k; rows are padded to the kernel's mr (avx2's 6 does not divide 128). 128 rather
// than 64 since the products skip the hidden micro-tiles of a tile across the causal diagonal
// (TileGemm's CausalSkip), so a larger tile no longer computes the diagonal's hidden half, and
// its per-tile costs (P·V's accumulator loads and stores per key tile, the rescaling of o, each
// task's packing) spread over twice the keys. On Zen 5 that is a small gain, about 2% of the cpu
// preset's attention in a training step by the medians of alternated pairs, near the noise of a
// single pair (bench/README, 2026-12-06).
constexpr int64_t kBq = 128;
constexpr int64_t kBk = 128;
static_assert(kBq == kBk, "one tile size serves the query and key tiles of the products");

// A tile: queries [q0, q0+nq) by index (positions offset + q0 on), keys [k0, k0+nk).
struct Tile {
  int64_t q0, nq, k0, nk;
};

// kSkip: no query of the tile sees any of its keys; kFull: every query sees every key;
// kPartial: some pairs are visible and some are not.
enum class TileMask { kSkip, kFull, kPartial };

class AttentionMask {
 public:
  // p must be valid (the kernels validate first); keeps p.doc.
  explicit AttentionMask(const AttentionParams& p);

  int64_t queries() const { return T_; }
  int64_t positions() const { return T_kv_; }
  int64_t offset() const { return T_kv_ - T_; }  // position of query 0
  // The tile's first query position minus its first key position: key kj of the tile is hidden
  // from query qi by the causal rule when kj > qi + diagonal_offset (TileGemm's CausalSkip).
  int64_t diagonal_offset(const Tile& t) const { return offset() + t.q0 - t.k0; }

  // The rule, for the positions i of a query and j of a key.
  bool visible(int64_t i, int64_t j) const {
    return j <= i && doc_[i] == doc_[j] && i / block_size_ - j / block_size_ < window_;
  }
  // The first key position the query at position i sees (the later of the start of its doc
  // and the start of its window); it sees exactly [first_visible(i), i].
  int64_t first_visible(int64_t i) const;
  // first_visible of every query, by query index.
  std::vector<int64_t> first_visible_of_queries() const;

  TileMask classify(const Tile& t) const;
  // Key tiles [first, last] a query tile may see: from the one holding the first key visible
  // to its first query to the one holding its last query's position.
  std::pair<int64_t, int64_t> key_tiles(int64_t q0, int64_t nq) const;
  // Query tiles [first, last] that may see a key tile: from the one holding the query at its
  // first key's position to the one holding the last query that sees its last key (end of that
  // key's doc or window); first > last when none does.
  std::pair<int64_t, int64_t> query_tiles(int64_t k0, int64_t nk) const;
  // The keys each query of a tile the mask does not skip sees, as ranges [lo, hi) of tile
  // columns, for all kBq rows (rows past the tile's queries see none). first_visible_of is
  // first_visible_of_queries().
  void visible_ranges(const Tile& t, TileMask mask, const int64_t* first_visible_of, int32_t* lo,
                      int32_t* hi) const;
  // Tiles visited (not skipped) per query tile and per key tile.
  void visited_counts(std::vector<int64_t>& per_query_tile,
                      std::vector<int64_t>& per_key_tile) const;

 private:
  const int32_t* doc_;
  int64_t T_, T_kv_, block_size_;
  // window_blocks capped so (block + W)·block_size cannot overflow; beyond T_kv/block_size + 1
  // every W means "no window".
  int64_t window_;
};

}  // namespace nanogpt
