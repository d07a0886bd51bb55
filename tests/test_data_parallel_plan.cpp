// The single-process parts of data-parallel training: the rank-major layouts of sharded state
// (bijections), the gradient buckets (every piece once, in backward order, within the size
// limit), the backward's ready stages (a gradient announced final never changes again), the
// even slices, and the optimizer's ownership of Muon matrices and Adam slices.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <set>

#include "model/gpt.hpp"
#include "optim/gpt_optimizer.hpp"
#include "optim/gradient_reducer.hpp"
#include "optim/shard_plan.hpp"
#include "runtime/comm.hpp"
#include "support/model.hpp"

namespace nanogpt {
namespace {

TEST(EvenSlice, TilesTheRangeWithSizesDifferingByAtMostOne) {
  for (int64_t n : {0, 1, 5, 7, 100, 1001}) {
    for (int parts : {1, 2, 3, 4, 7}) {
      int64_t next = 0, lo = n, hi = 0;
      for (int p = 0; p < parts; ++p) {
        const SliceRange s = even_slice(n, parts, p);
        EXPECT_EQ(s.begin, next) << n << " " << parts << " " << p;
        next = s.end;
        lo = std::min(lo, s.size());
        hi = std::max(hi, s.size());
      }
      EXPECT_EQ(next, n);
      EXPECT_LE(hi - lo, 1);
    }
  }
}

// Pieces of uneven lengths and owners over a buffer with gaps.
std::vector<ShardPiece> sample_pieces(int ranks) {
  std::vector<ShardPiece> pieces;
  size_t offset = 3;
  for (int i = 0; i < 11; ++i) {
    const size_t length = 1 + static_cast<size_t>((i * 7) % 5);
    pieces.push_back({offset, length, (i * 5 + 1) % ranks, i});
    offset += length + static_cast<size_t>(i % 2);  // gaps between some pieces
  }
  return pieces;
}

TEST(RankMajorLayout, IsABijectionWithEachRanksPiecesContiguousInOrder) {
  for (int ranks : {1, 2, 3, 4}) {
    const std::vector<ShardPiece> pieces = sample_pieces(ranks);
    const RankMajorLayout l = RankMajorLayout::of(pieces, ranks);
    size_t total = 0;
    for (const ShardPiece& p : pieces) total += p.length;
    ASSERT_EQ(l.total, total);
    // Each packed position is hit exactly once.
    std::vector<int> hits(l.total, 0);
    for (size_t i = 0; i < pieces.size(); ++i) {
      for (size_t k = 0; k < pieces[i].length; ++k) ++hits[l.position[i] + k];
      // Inside its owner's part.
      const auto r = static_cast<size_t>(pieces[i].owner);
      EXPECT_GE(l.position[i], l.rank_begin[r]);
      EXPECT_LE(l.position[i] + pieces[i].length,
                l.rank_begin[r] + static_cast<size_t>(l.counts[r]));
    }
    EXPECT_TRUE(std::all_of(hits.begin(), hits.end(), [](int h) { return h == 1; }));
    // pack then unpack restores exactly the pieces' ranges and leaves the gaps alone.
    const size_t n = pieces.back().offset + pieces.back().length + 2;
    std::vector<float> flat(n), packed(l.total, -1.0f), back(n, 0.5f);
    for (size_t i = 0; i < n; ++i) flat[i] = static_cast<float>(i) * 1.25f - 3.0f;
    l.pack(pieces, flat.data(), packed.data());
    EXPECT_TRUE(std::none_of(packed.begin(), packed.end(), [](float v) { return v == -1.0f; }));
    l.unpack(pieces, packed.data(), back.data());
    std::vector<bool> covered(n, false);
    for (const ShardPiece& p : pieces) {
      for (size_t k = 0; k < p.length; ++k) covered[p.offset + k] = true;
    }
    for (size_t i = 0; i < n; ++i) EXPECT_EQ(back[i], covered[i] ? flat[i] : 0.5f) << i;
    // A rank's part alone is its slice of the whole packing, and unpacks to its pieces only.
    for (int r = 0; r < ranks; ++r) {
      const auto ru = static_cast<size_t>(r);
      std::vector<float> part(static_cast<size_t>(l.counts[ru]));
      l.pack_part(pieces, flat.data(), part.data(), r);
      EXPECT_TRUE(std::equal(part.begin(), part.end(),
                             packed.begin() + static_cast<long>(l.rank_begin[ru])));
      std::vector<float> only(n, 0.5f);
      l.unpack_part(pieces, part.data(), only.data(), r);
      for (const ShardPiece& p : pieces) {
        for (size_t k = 0; k < p.length; ++k) {
          EXPECT_EQ(only[p.offset + k], p.owner == r ? flat[p.offset + k] : 0.5f);
        }
      }
    }
    // Packing one owner writes only its part.
    std::vector<float> one(l.total, -1.0f);
    l.pack(pieces, flat.data(), one.data(), ranks - 1);
    for (size_t i = 0; i < l.total; ++i) {
      const bool in_last = i >= l.rank_begin.back();
      EXPECT_EQ(one[i] != -1.0f, in_last) << i;
    }
  }
}

TEST(GradientBuckets, HoldEveryPieceOnceInBackwardOrderWithinTheSizeLimit) {
  const int ranks = 3;
  std::vector<ShardPiece> pieces;
  std::vector<int> stage;
  size_t offset = 0;
  for (int t = 0; t < 20; ++t) {
    const size_t length = 1000 + static_cast<size_t>(t % 4) * 50000;  // up to ~0.6 MiB
    pieces.push_back({offset, length, t % ranks, t});
    stage.push_back((t * 7) % 5);
    offset += length;
  }
  const double mb = 0.5;
  const auto buckets = GradientReducer::plan(pieces, stage, mb, ranks, 1);
  std::multiset<size_t> seen;
  int last_stage = -1;
  for (const auto& b : buckets) {
    size_t floats = 0;
    int max_stage = 0;
    for (const ShardPiece& p : b.pieces) {
      seen.insert(p.offset);
      floats += p.length;
      max_stage = std::max(max_stage, stage[static_cast<size_t>(p.tensor)]);
      // Backward order: never a piece of an earlier stage after a later one.
      EXPECT_GE(stage[static_cast<size_t>(p.tensor)], last_stage);
      last_stage = stage[static_cast<size_t>(p.tensor)];
    }
    EXPECT_EQ(b.ready_stage, max_stage);
    EXPECT_TRUE(floats * 4 <= mb * 1024 * 1024 || b.pieces.size() == 1) << floats;
    EXPECT_EQ(b.layout.total, floats);
  }
  EXPECT_EQ(seen.size(), pieces.size());
  for (const ShardPiece& p : pieces) EXPECT_EQ(seen.count(p.offset), 1u);
  // Buckets become ready in index order, so every rank starts them in the same order.
  for (size_t i = 1; i < buckets.size(); ++i) {
    EXPECT_LE(buckets[i - 1].ready_stage, buckets[i].ready_stage);
  }
}

// A listener that snapshots the gradients at every stage: a gradient announced final must
// equal its value at the end of the backward.
class Snapshots : public BackwardListener {
 public:
  explicit Snapshots(const Gpt& m) : model_(m) {}
  void gradients_final(int stage) override {
    stages.push_back(stage);
    grads.emplace_back(model_.grads().begin(), model_.grads().end());
  }
  std::vector<int> stages;
  std::vector<std::vector<float>> grads;

 private:
  const Gpt& model_;
};

TEST(BackwardStages, AGradientAnnouncedFinalNeverChangesAfterwards) {
  Config c = micro_config();
  c.precision = PrecisionSetting::kFp32;
  c.num_experts = 3;  // an MoE block too: its router and experts
  c.experts_per_token = 2;
  c.moe_layers = {4};
  Gpt model(c);
  randomize(model, 5);
  const std::vector<uint32_t> tokens = synthetic_tokens(c.train_seq_len + 1, 9);
  std::vector<int32_t> in(tokens.begin(), tokens.end() - 1), tgt(tokens.begin() + 1, tokens.end());
  Snapshots snaps(model);
  model.zero_grads();
  model.forward_backward(in, tgt, 2, 1.0f / static_cast<float>(in.size()), c.train_seq_len, &snaps);
  std::vector<int> expected(static_cast<size_t>(model.backward_stages()));
  std::iota(expected.begin(), expected.end(), 0);
  ASSERT_EQ(snaps.stages, expected);
  const auto& tensors = model.params().tensors();
  const auto& ready = model.gradient_ready_stages();
  ASSERT_EQ(ready.size(), tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    const ParamTensor& t = tensors[i];
    const auto& at_stage = snaps.grads[static_cast<size_t>(ready[i])];
    bool nonzero = false;
    for (size_t k = 0; k < t.numel; ++k) {
      ASSERT_EQ(at_stage[t.offset + k], model.grads()[t.offset + k]) << t.name << " element " << k;
      nonzero |= model.grads()[t.offset + k] != 0.0f;
    }
    // Not vacuous: the backward wrote the gradient (randomize leaves no weight at zero).
    if (ready[i] > 0) {
      EXPECT_TRUE(nonzero) << t.name;
      // And it was not yet final one stage earlier (the stage is the earliest possible).
      const auto& before = snaps.grads[static_cast<size_t>(ready[i] - 1)];
      bool differs = false;
      for (size_t k = 0; k < t.numel && !differs; ++k) {
        differs = before[t.offset + k] != model.grads()[t.offset + k];
      }
      EXPECT_TRUE(differs) << t.name << " was already final at stage " << ready[i] - 1;
    }
  }
}

TEST(OptimizerShards, SingleProcessOwnsEverythingAndHasNoCommunicationBuffers) {
  Config c = micro_config();
  Gpt model(c);
  GptOptimizer opt(model.params(), c, Precision::kFp32);
  EXPECT_EQ(opt.begin_gradient_reduction(model.grads().data()), nullptr);
  EXPECT_EQ(opt.communication_bytes(), 0u);
  size_t matrix = 0, other = 0;
  for (const ParamTensor& t : model.params().tensors()) {
    (t.group == ParamGroup::kMatrix ? matrix : other) += t.numel;
  }
  EXPECT_EQ(opt.state_bytes(), (matrix + 2 * other) * sizeof(float));
}

}  // namespace
}  // namespace nanogpt
