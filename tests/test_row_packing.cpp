// Best-fit packing of rendered conversations into training rows (posttrain/row_packing.hpp).
#include "posttrain/row_packing.hpp"

#include <gtest/gtest.h>

#include <cstdio>
#include <set>

#include "runtime/error.hpp"
#include "runtime/random.hpp"

namespace nanogpt {
namespace {

constexpr int32_t kPad = 99;

struct Items {
  std::vector<std::vector<uint32_t>> ids;
  std::vector<std::vector<uint8_t>> masks;
  std::vector<PackItem> view() const {
    std::vector<PackItem> v;
    for (size_t i = 0; i < ids.size(); ++i) v.push_back({ids[i], masks[i]});
    return v;
  }
};

// Item i has `len` ids 1000·(i+1) + k, a begin token first (mask 0), then mask 1 on odd k.
Items make_items(const std::vector<int>& lengths) {
  Items it;
  for (size_t i = 0; i < lengths.size(); ++i) {
    std::vector<uint32_t> ids;
    std::vector<uint8_t> mask;
    for (int k = 0; k < lengths[i]; ++k) {
      ids.push_back(static_cast<uint32_t>(1000 * (i + 1) + static_cast<size_t>(k)));
      mask.push_back(k > 0 && k % 2 == 1 ? 1 : 0);
    }
    it.ids.push_back(ids);
    it.masks.push_back(mask);
  }
  return it;
}

std::string name(size_t i) {
  return "item " + std::to_string(i);
}

TEST(RowPacking, BestFitDecreasingByHand) {
  // Rows of 8 ids (7 inputs): 6 → row 0 (room 2), 5 → row 1 (3), 4 → row 2 (4), 3 → row 1
  // (tightest room ≥ 3: exactly 3), 2 → row 0 (room 2).
  const Items it = make_items({6, 5, 4, 3, 2});
  const auto view = it.view();
  const PackedRows p = pack_rows(view, 7, kPad, name);
  ASSERT_EQ(p.rows, 3);
  EXPECT_EQ(p.items[0], (std::vector<int64_t>{0, 4}));
  EXPECT_EQ(p.items[1], (std::vector<int64_t>{1, 3}));
  EXPECT_EQ(p.items[2], (std::vector<int64_t>{2}));
  // Row 2: item 2's four ids, then padding.
  const std::vector<int32_t> row2(p.ids.begin() + 16, p.ids.begin() + 24);
  EXPECT_EQ(row2, (std::vector<int32_t>{3000, 3001, 3002, 3003, kPad, kPad, kPad, kPad}));
  // Its targets: ids 1..7 of the row; loss on 3001 and 3003 (mask 1 at k = 1, 3).
  const auto w = p.row_weights(2);
  EXPECT_EQ(std::vector<uint8_t>(w.begin(), w.end()), (std::vector<uint8_t>{1, 0, 1, 0, 0, 0, 0}));
  EXPECT_EQ(p.row_inputs(2)[0], 3000);
  EXPECT_EQ(p.row_targets(2)[0], 3001);
  EXPECT_EQ(p.item_tokens, 20);
}

TEST(RowPacking, EveryItemWholeOnceAndTargetsAreTheShiftedMask) {
  Rng rng(7);
  std::vector<int> lengths;
  for (int i = 0; i < 300; ++i) lengths.push_back(1 + static_cast<int>(rng.next_u64() % 64));
  const Items it = make_items(lengths);
  const auto view = it.view();
  const int64_t L = 63;
  const PackedRows p = pack_rows(view, L, kPad, name);
  std::set<int64_t> seen;
  int64_t loss = 0, used = 0;
  for (int64_t r = 0; r < p.rows; ++r) {
    int64_t at = 0;
    for (int64_t i : p.items[static_cast<size_t>(r)]) {
      EXPECT_TRUE(seen.insert(i).second) << "item " << i << " packed twice";
      const auto& ids = it.ids[static_cast<size_t>(i)];
      const auto& mask = it.masks[static_cast<size_t>(i)];
      for (size_t k = 0; k < ids.size(); ++k, ++at) {
        ASSERT_LT(at, L + 1);
        EXPECT_EQ(p.ids[static_cast<size_t>(r * (L + 1) + at)], static_cast<int32_t>(ids[k]));
        if (at > 0) {
          EXPECT_EQ(p.row_weights(r)[static_cast<size_t>(at - 1)], mask[k]);
        }
        loss += (at > 0 && mask[k]) ? 1 : 0;
      }
    }
    used += at;
    for (; at < L + 1; ++at) {
      EXPECT_EQ(p.ids[static_cast<size_t>(r * (L + 1) + at)], kPad);
      if (at > 0) {
        EXPECT_EQ(p.row_weights(r)[static_cast<size_t>(at - 1)], 0);
      }
    }
  }
  EXPECT_EQ(seen.size(), lengths.size());
  EXPECT_EQ(p.loss_tokens, loss);
  EXPECT_EQ(p.item_tokens, used);
  // Best fit decreasing uses at most 11/9·OPT + 6/9 rows (Dósa 2007), and OPT is at least the
  // tokens over the row size.
  const int64_t lower = (used + L) / (L + 1);
  EXPECT_LE(static_cast<double>(p.rows), 11.0 / 9.0 * static_cast<double>(lower) + 6.0 / 9.0)
      << "rows " << p.rows << " lower bound " << lower;
  std::printf("[   info   ] %lld rows for %lld tokens (lower bound %lld rows)\n",
              static_cast<long long>(p.rows), static_cast<long long>(used),
              static_cast<long long>(lower));
  // Deterministic.
  const PackedRows q = pack_rows(view, L, kPad, name);
  EXPECT_EQ(q.ids, p.ids);
  EXPECT_EQ(q.targets, p.targets);
}

TEST(RowPacking, NeverCropsAndNamesTheItem) {
  const Items it = make_items({5, 9, 3});
  const auto view = it.view();
  try {
    pack_rows(view, 7, kPad, name);
    FAIL() << "an item of 9 ids fits no row of 8";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("item 1 is 9 tokens"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("never cropped"), std::string::npos) << e.what();
  }
  // An item exactly a row long fits.
  EXPECT_EQ(pack_rows(view, 8, kPad, name).rows, 2);
}

}  // namespace
}  // namespace nanogpt
