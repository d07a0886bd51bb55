#include "optim/shard_plan.hpp"

#include <algorithm>
#include <limits>
#include <string>

#include "runtime/error.hpp"

namespace nanogpt {

RankMajorLayout RankMajorLayout::of(std::span<const ShardPiece> pieces, int ranks) {
  RankMajorLayout l;
  std::vector<size_t> per_rank(static_cast<size_t>(ranks), 0);
  for (const ShardPiece& p : pieces) {
    if (p.owner < 0 || p.owner >= ranks) {
      throw Error("internal: a shard piece belongs to rank " + std::to_string(p.owner) + " of " +
                  std::to_string(ranks));
    }
    per_rank[static_cast<size_t>(p.owner)] += p.length;
  }
  l.rank_begin.resize(static_cast<size_t>(ranks));
  l.counts.resize(static_cast<size_t>(ranks));
  for (size_t r = 0; r < per_rank.size(); ++r) {
    if (per_rank[r] > static_cast<size_t>(std::numeric_limits<int>::max())) {
      throw Error(
          "internal: a rank's part of a collective exceeds 2^31 - 1 floats; lower bucket_mb");
    }
    l.rank_begin[r] = l.total;
    l.counts[r] = static_cast<int>(per_rank[r]);
    l.total += per_rank[r];
  }
  std::vector<size_t> next = l.rank_begin;
  l.position.reserve(pieces.size());
  for (const ShardPiece& p : pieces) {
    l.position.push_back(next[static_cast<size_t>(p.owner)]);
    next[static_cast<size_t>(p.owner)] += p.length;
  }
  return l;
}

void RankMajorLayout::pack(std::span<const ShardPiece> pieces, const float* flat, float* packed,
                           int owner) const {
  for (size_t i = 0; i < pieces.size(); ++i) {
    const ShardPiece& p = pieces[i];
    if (owner >= 0 && p.owner != owner) continue;
    std::copy(flat + p.offset, flat + p.offset + p.length, packed + position[i]);
  }
}

void RankMajorLayout::unpack(std::span<const ShardPiece> pieces, const float* packed, float* flat,
                             int owner) const {
  for (size_t i = 0; i < pieces.size(); ++i) {
    const ShardPiece& p = pieces[i];
    if (owner >= 0 && p.owner != owner) continue;
    std::copy(packed + position[i], packed + position[i] + p.length, flat + p.offset);
  }
}

void RankMajorLayout::pack_part(std::span<const ShardPiece> pieces, const float* flat, float* part,
                                int rank) const {
  const size_t base = rank_begin[static_cast<size_t>(rank)];
  for (size_t i = 0; i < pieces.size(); ++i) {
    const ShardPiece& p = pieces[i];
    if (p.owner != rank) continue;
    std::copy(flat + p.offset, flat + p.offset + p.length, part + (position[i] - base));
  }
}

void RankMajorLayout::unpack_part(std::span<const ShardPiece> pieces, const float* part,
                                  float* flat, int rank) const {
  const size_t base = rank_begin[static_cast<size_t>(rank)];
  for (size_t i = 0; i < pieces.size(); ++i) {
    const ShardPiece& p = pieces[i];
    if (p.owner != rank) continue;
    const float* from = part + (position[i] - base);
    std::copy(from, from + p.length, flat + p.offset);
  }
}

}  // namespace nanogpt
