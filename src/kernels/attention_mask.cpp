#include "kernels/attention_mask.hpp"

#include <algorithm>

#include "runtime/integer_math.hpp"

namespace nanogpt {

AttentionMask::AttentionMask(const AttentionParams& p)
    : doc_(p.doc),
      T_(p.T),
      T_kv_(p.T_kv == 0 ? p.T : p.T_kv),
      block_size_(p.block_size),
      window_(std::min(p.window_blocks, T_kv_ / p.block_size + 2)) {}

int64_t AttentionMask::first_visible(int64_t i) const {
  const int64_t doc_start = std::lower_bound(doc_, doc_ + i, doc_[i]) - doc_;
  const int64_t window_start = (i / block_size_ - window_ + 1) * block_size_;
  return std::max(doc_start, window_start);
}

std::vector<int64_t> AttentionMask::first_visible_of_queries() const {
  std::vector<int64_t> fv(static_cast<size_t>(T_));
  for (int64_t q = 0; q < T_; ++q) fv[static_cast<size_t>(q)] = first_visible(offset() + q);
  return fv;
}

// The pair (first query, last key) is the easiest to see: if it is hidden by its documents
// (docs nondecreasing) or the window, every pair is, and if the tile lies after the last query
// causally, every pair is too. The pair (last query, first key) is the hardest: if it is
// visible and the last key is not after the first query, every pair is.
TileMask AttentionMask::classify(const Tile& t) const {
  const int64_t p0 = offset() + t.q0, p1 = p0 + t.nq - 1, k1 = t.k0 + t.nk - 1;
  if (t.k0 > p1 || doc_[k1] < doc_[p0] || p0 / block_size_ - k1 / block_size_ >= window_) {
    return TileMask::kSkip;
  }
  if (k1 <= p0 && visible(p1, t.k0)) return TileMask::kFull;
  return TileMask::kPartial;
}

std::pair<int64_t, int64_t> AttentionMask::key_tiles(int64_t q0, int64_t nq) const {
  return {first_visible(offset() + q0) / kBk, (offset() + q0 + nq - 1) / kBk};
}

std::pair<int64_t, int64_t> AttentionMask::query_tiles(int64_t k0, int64_t nk) const {
  const int64_t k1 = k0 + nk - 1;
  const int64_t doc_end = std::upper_bound(doc_, doc_ + T_kv_, doc_[k1]) - doc_;
  const int64_t window_end = (k1 / block_size_ + window_) * block_size_;
  // Positions [k0, end) may see the tile; as query indices, [first, last].
  const int64_t end = std::min({T_kv_, doc_end, window_end});
  const int64_t first = std::max<int64_t>(k0 - offset(), 0), last = end - 1 - offset();
  if (last < first) return {1, 0};
  return {first / kBq, last / kBq};
}

void AttentionMask::visible_ranges(const Tile& t, TileMask mask, const int64_t* first_visible_of,
                                   int32_t* lo, int32_t* hi) const {
  for (int64_t i = 0; i < kBq; ++i) {
    int64_t a = 0, b = 0;
    if (i < t.nq && mask == TileMask::kFull) {
      b = t.nk;
    } else if (i < t.nq) {
      a = std::clamp<int64_t>(first_visible_of[t.q0 + i] - t.k0, 0, t.nk);
      b = std::clamp<int64_t>(offset() + t.q0 + i + 1 - t.k0, a, t.nk);
    }
    lo[i] = static_cast<int32_t>(a);
    hi[i] = static_cast<int32_t>(b);
  }
}

void AttentionMask::visited_counts(std::vector<int64_t>& per_query_tile,
                                   std::vector<int64_t>& per_key_tile) const {
  const int64_t nqt = ceil_div(T_, kBq);
  per_query_tile.assign(static_cast<size_t>(nqt), 0);
  per_key_tile.assign(static_cast<size_t>(ceil_div(T_kv_, kBk)), 0);
  for (int64_t qt = 0; qt < nqt; ++qt) {
    const int64_t q0 = qt * kBq, nq = std::min(kBq, T_ - q0);
    const auto [kt_lo, kt_hi] = key_tiles(q0, nq);
    for (int64_t kt = kt_lo; kt <= kt_hi; ++kt) {
      const Tile t{q0, nq, kt * kBk, std::min(kBk, T_kv_ - kt * kBk)};
      if (classify(t) == TileMask::kSkip) continue;
      ++per_query_tile[static_cast<size_t>(qt)];
      ++per_key_tile[static_cast<size_t>(kt)];
    }
  }
}

}  // namespace nanogpt
