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
};

}  // namespace nanogpt
