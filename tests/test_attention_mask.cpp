#include "kernels/attention_mask.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

namespace nanogpt {
namespace {

// A random mask: T_kv positions in runs of random documents, the last T of them queries, a
// random block size and window (sometimes far wider than the sequence).
struct RandomMask {
  std::vector<int32_t> doc;
  AttentionParams p;

  explicit RandomMask(std::mt19937& rng) {
    auto pick = [&](int64_t lo, int64_t hi) {
      return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
    };
    const int64_t T_kv = pick(1, 400);
    doc.resize(static_cast<size_t>(T_kv));
    const int64_t mean_doc = std::vector<int64_t>{1, 5, 40, 200, 1000}[pick(0, 4)];
    int32_t id = static_cast<int32_t>(pick(0, 5));
    for (int64_t t = 0; t < T_kv; ++t) {
      if (t > 0 && pick(0, mean_doc - 1) == 0) id += static_cast<int32_t>(pick(1, 3));
      doc[static_cast<size_t>(t)] = id;
    }
    p.T_kv = pick(0, 1) == 0 ? T_kv : 0;  // 0 means T: then every position is a query
    p.T = p.T_kv == 0 ? T_kv : pick(1, T_kv);
    p.H = 1;
    p.D = 1;
    p.ld = 1;
    p.doc = doc.data();
    p.block_size = std::vector<int64_t>{1, 3, 16, 64, 100, 128}[pick(0, 5)];
    p.window_blocks = std::vector<int64_t>{1, 2, 3, 7, 1000000000}[pick(0, 4)];
  }

  std::string describe() const {
    return "T=" + std::to_string(p.T) + " T_kv=" + std::to_string(doc.size()) +
           " block_size=" + std::to_string(p.block_size) +
           " window_blocks=" + std::to_string(p.window_blocks);
  }
};

// The rule as attention.hpp states it, independent of the library.
bool sees(const AttentionParams& p, int64_t i, int64_t j) {
  return j <= i && p.doc[i] == p.doc[j] && i / p.block_size - j / p.block_size < p.window_blocks;
}

TEST(AttentionMask, PredicateAndFirstVisibleFollowTheRule) {
  std::mt19937 rng(1);
  for (int trial = 0; trial < 200; ++trial) {
    const RandomMask r(rng);
    const AttentionMask mask(r.p);
    const int64_t n = mask.positions();
    const std::vector<int64_t> fv = mask.first_visible_of_queries();
    ASSERT_EQ(static_cast<int64_t>(fv.size()), r.p.T);
    for (int64_t i = 0; i < n; ++i) {
      const int64_t first = mask.first_visible(i);
      for (int64_t j = 0; j < n; ++j) {
        ASSERT_EQ(mask.visible(i, j), sees(r.p, i, j)) << r.describe() << " i=" << i << " j=" << j;
        // The visible keys are exactly [first_visible(i), i].
        ASSERT_EQ(sees(r.p, i, j), j >= first && j <= i)
            << r.describe() << " i=" << i << " j=" << j << " first=" << first;
      }
      if (i >= mask.offset()) {
        EXPECT_EQ(fv[static_cast<size_t>(i - mask.offset())], first);
      }
    }
  }
}

// The profiler's work per call: every (query, key) pair the rule admits, counted by brute force.
TEST(AttentionMask, VisiblePairsCountTheRulesPairs) {
  std::mt19937 rng(5);
  for (int trial = 0; trial < 200; ++trial) {
    const RandomMask r(rng);
    const int64_t n = static_cast<int64_t>(r.doc.size());
    int64_t expected = 0;
    for (int64_t i = n - r.p.T; i < n; ++i) {
      for (int64_t j = 0; j < n; ++j) expected += sees(r.p, i, j) ? 1 : 0;
    }
    EXPECT_EQ(attention_visible_pairs(r.p), expected) << r.describe();
  }
}

TEST(AttentionMask, TileGeometryAgreesWithTheRule) {
  // Every (query tile, key tile) pair: the classification is exact (skip: no pair visible;
  // full: every pair; partial: some of each), the key and query tile ranges contain every tile
  // not skipped, the per-row ranges are exactly the visible keys, and the visited counts count
  // the tiles not skipped.
  std::mt19937 rng(2);
  int64_t seen[3] = {0, 0, 0};
  for (int trial = 0; trial < 200; ++trial) {
    const RandomMask r(rng);
    const AttentionMask mask(r.p);
    const int64_t T = mask.queries(), T_kv = mask.positions(), off = mask.offset();
    const int64_t nqt = (T + kBq - 1) / kBq, nkt = (T_kv + kBk - 1) / kBk;
    const std::vector<int64_t> fv = mask.first_visible_of_queries();
    std::vector<int64_t> per_q, per_k, want_q(static_cast<size_t>(nqt), 0),
        want_k(static_cast<size_t>(nkt), 0);
    mask.visited_counts(per_q, per_k);
    for (int64_t qt = 0; qt < nqt; ++qt) {
      for (int64_t kt = 0; kt < nkt; ++kt) {
        const Tile t{qt * kBq, std::min(kBq, T - qt * kBq), kt * kBk,
                     std::min(kBk, T_kv - kt * kBk)};
        int64_t visible = 0;
        for (int64_t i = 0; i < t.nq; ++i) {
          for (int64_t j = 0; j < t.nk; ++j) visible += sees(r.p, off + t.q0 + i, t.k0 + j);
        }
        const TileMask kind = mask.classify(t);
        const std::string where =
            r.describe() + " qt=" + std::to_string(qt) + " kt=" + std::to_string(kt);
        const TileMask want = visible == 0             ? TileMask::kSkip
                              : visible == t.nq * t.nk ? TileMask::kFull
                                                       : TileMask::kPartial;
        ASSERT_EQ(static_cast<int>(kind), static_cast<int>(want)) << where;
        ++seen[static_cast<int>(kind)];
        if (kind == TileMask::kSkip) continue;
        ++want_q[static_cast<size_t>(qt)];
        ++want_k[static_cast<size_t>(kt)];
        const auto [kt_lo, kt_hi] = mask.key_tiles(t.q0, t.nq);
        EXPECT_TRUE(kt >= kt_lo && kt <= kt_hi) << where;
        const auto [qt_lo, qt_hi] = mask.query_tiles(t.k0, t.nk);
        EXPECT_TRUE(qt >= qt_lo && qt <= qt_hi) << where;
        int32_t lo[kBq], hi[kBq];
        mask.visible_ranges(t, kind, fv.data(), lo, hi);
        for (int64_t i = 0; i < kBq; ++i) {
          for (int64_t j = 0; j < t.nk; ++j) {
            const bool in = j >= lo[i] && j < hi[i];
            const bool want_in = i < t.nq && sees(r.p, off + t.q0 + i, t.k0 + j);
            ASSERT_EQ(in, want_in) << where << " row " << i << " column " << j;
          }
        }
      }
    }
    EXPECT_EQ(per_q, want_q) << r.describe();
    EXPECT_EQ(per_k, want_k) << r.describe();
  }
  // The random cases reach all three kinds.
  EXPECT_GT(seen[0], 0);
  EXPECT_GT(seen[1], 0);
  EXPECT_GT(seen[2], 0);
}

TEST(AttentionMask, TileRangesAreTight) {
  // The ranges may include skipped tiles in between, but their ends are tiles a query sees,
  // so the kernels' loops start and stop where the work does (for ranges that are not empty).
  std::mt19937 rng(3);
  for (int trial = 0; trial < 200; ++trial) {
    const RandomMask r(rng);
    const AttentionMask mask(r.p);
    const int64_t T = mask.queries(), T_kv = mask.positions();
    auto tile = [&](int64_t qt, int64_t kt) {
      return Tile{qt * kBq, std::min(kBq, T - qt * kBq), kt * kBk, std::min(kBk, T_kv - kt * kBk)};
    };
    for (int64_t qt = 0; qt * kBq < T; ++qt) {
      const auto [lo, hi] = mask.key_tiles(qt * kBq, std::min(kBq, T - qt * kBq));
      EXPECT_NE(static_cast<int>(mask.classify(tile(qt, lo))), static_cast<int>(TileMask::kSkip))
          << r.describe();
      EXPECT_NE(static_cast<int>(mask.classify(tile(qt, hi))), static_cast<int>(TileMask::kSkip))
          << r.describe();
    }
  }
}

}  // namespace
}  // namespace nanogpt
