// How data-parallel ranks share the optimizer's work and state. Every Muon matrix belongs to
// one rank (the k-th largest to rank k mod N), which keeps its momentum and orthogonalises it,
// as the seed's distributed Muon does; every Adam tensor is cut into N even slices (ZeRO-1),
// rank r keeping the moments of slice r and updating it. A piece is a range of the flat
// parameter (and gradient) buffer and the rank it belongs to: the gradient reduction delivers
// each rank the summed gradients of its pieces, and the parameter gather sends each rank's
// updated pieces to all.
#pragma once

#include <cstddef>
#include <span>
#include <utility>
#include <vector>

namespace nanogpt {

struct ShardPiece {
  size_t offset = 0;  // in the flat parameter and gradient buffers
  size_t length = 0;  // floats
  int owner = 0;      // rank
  int tensor = 0;     // index in ParameterSet::tensors()
};

// A list of pieces packed rank by rank: rank 0's in the order given, then rank 1's, and so on,
// the layout MPI's reduce-scatter and all-gather(v) take: rank r's part is counts[r] floats
// from rank_begin[r]. Every piece lands at position[i], and the packing is a bijection between
// the pieces' ranges and [0, total) (tested).
struct RankMajorLayout {
  std::vector<int> counts;
  std::vector<size_t> rank_begin;
  std::vector<size_t> position;  // of each piece, in the order given
  size_t total = 0;

  static RankMajorLayout of(std::span<const ShardPiece> pieces, int ranks);
  // packed[position[i] ...] = flat[pieces[i].offset ...], for every piece (owner < 0) or only
  // those of one owner.
  void pack(std::span<const ShardPiece> pieces, const float* flat, float* packed,
            int owner = -1) const;
  // The reverse: flat[pieces[i].offset ...] = packed[position[i] ...].
  void unpack(std::span<const ShardPiece> pieces, const float* packed, float* flat,
              int owner = -1) const;
  // Rank `rank`'s part alone (counts[rank] floats, what it sends to an all-gather or receives
  // from a reduce-scatter): its pieces from `flat` into `part`, and back.
  void pack_part(std::span<const ShardPiece> pieces, const float* flat, float* part,
                 int rank) const;
  void unpack_part(std::span<const ShardPiece> pieces, const float* part, float* flat,
                   int rank) const;
};

// Lays out groups of pieces (gradient buckets, parameter-gather rounds; each with `pieces`,
// `layout`, `all_begin` and `mine_begin`) one after another: each group's rank-major layout,
// its region in a buffer of every rank's parts (all_begin) and in one of this rank's part
// alone (mine_begin). Returns the two buffers' sizes.
template <class Group>
std::pair<size_t, size_t> lay_out_groups(std::vector<Group>& groups, int ranks, int rank) {
  size_t all = 0, mine = 0;
  for (Group& g : groups) {
    g.layout = RankMajorLayout::of(g.pieces, ranks);
    g.all_begin = all;
    g.mine_begin = mine;
    all += g.layout.total;
    mine += static_cast<size_t>(g.layout.counts[static_cast<size_t>(rank)]);
  }
  return {all, mine};
}

}  // namespace nanogpt
