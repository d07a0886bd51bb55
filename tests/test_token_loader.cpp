#include <gtest/gtest.h>

#include <random>

#include "data/token_loader.hpp"
#include "data/token_shard.hpp"
#include "runtime/error.hpp"
#include "support/fixtures.hpp"

namespace nanogpt {
namespace {

// Writes shards of the given sizes filled with random tokens; returns their contents.
std::vector<std::vector<uint16_t>> make_shards(const std::string& dir,
                                               const std::vector<size_t>& sizes, uint32_t vocab,
                                               uint32_t seed, const std::string& prefix = "train") {
  std::mt19937 rng(seed);
  std::vector<std::vector<uint16_t>> out;
  for (size_t s = 0; s < sizes.size(); ++s) {
    ShardWriter w(dir, prefix + "_part" + std::to_string(s), sizes[s]);
    std::vector<uint32_t> t(sizes[s]);
    for (auto& x : t) x = rng() % vocab;
    w.append(t);
    w.finish();
    out.emplace_back(t.begin(), t.end());
  }
  return out;
}

// modded-nanogpt's distributed_data_generator, transliterated line by line.
struct SeedGenerator {
  const std::vector<std::vector<uint16_t>>& files;
  uint64_t batch, rank, world;
  size_t file_iter = 0;
  const std::vector<uint16_t>* tokens;
  uint64_t pos = 0;
  SeedGenerator(const std::vector<std::vector<uint16_t>>& f, uint64_t b, uint64_t r, uint64_t w)
      : files(f), batch(b), rank(r), world(w), tokens(&files[file_iter++]) {}
  bool next(std::vector<int32_t>& in, std::vector<int32_t>& tg) {
    uint64_t local = batch / world;
    if (pos + batch + 1 >= tokens->size()) {
      if (file_iter == files.size()) return false;  // StopIteration
      tokens = &files[file_iter++];
      pos = 0;
    }
    in.clear();
    tg.clear();
    for (uint64_t i = 0; i < local; ++i) {
      in.push_back((*tokens)[pos + rank * local + i]);
      tg.push_back((*tokens)[pos + rank * local + i + 1]);
    }
    pos += batch;
    return true;
  }
};

TEST(TokenLoader, MatchesSeedGeneratorForEveryRank) {
  TempDir dir;
  auto shards = make_shards(dir.path(), {1000, 777, 1500}, 50257, 7);
  for (uint64_t world : {1, 2, 4}) {
    for (uint64_t batch : {8, 64, 96}) {
      for (uint64_t rank = 0; rank < world; ++rank) {
        LoaderOptions o;
        o.pattern = dir.path() + "/train_*.bin";
        o.batch_tokens = batch;
        o.rank = static_cast<int>(rank);
        o.world_size = static_cast<int>(world);
        TokenLoader loader(o);
        SeedGenerator ref(shards, batch, rank, world);
        std::vector<int32_t> a_in, a_tg, b_in, b_tg;
        int steps = 0;
        while (ref.next(b_in, b_tg)) {
          loader.next(a_in, a_tg);
          ASSERT_EQ(a_in, b_in) << "world " << world << " batch " << batch << " rank " << rank
                                << " step " << steps;
          ASSERT_EQ(a_tg, b_tg);
          ++steps;
        }
        EXPECT_GT(steps, 10);
        EXPECT_THROW(loader.next(a_in, a_tg), InputError);  // data used up, as StopIteration
      }
    }
  }
}

TEST(TokenLoader, CyclesAndRestoresPositionExactly) {
  TempDir dir;
  make_shards(dir.path(), {300, 400}, 1000, 11);
  LoaderOptions o;
  o.pattern = dir.path() + "/train_*.bin";
  o.batch_tokens = 50;
  o.cycle = true;
  TokenLoader a(o);
  std::vector<int32_t> in, tg;
  std::vector<std::vector<int32_t>> first_pass;
  for (int i = 0; i < 25; ++i) {
    a.next(in, tg);
    first_pass.push_back(in);
  }
  EXPECT_GE(a.position().epoch, 1u);
  // Restore a saved position in a fresh loader: it continues identically.
  LoaderPosition saved = a.position();
  std::vector<std::vector<int32_t>> cont_a, cont_b;
  for (int i = 0; i < 12; ++i) {
    a.next(in, tg);
    cont_a.push_back(in);
  }
  TokenLoader b(o);
  b.restore(saved);
  for (int i = 0; i < 12; ++i) {
    b.next(in, tg);
    cont_b.push_back(in);
  }
  EXPECT_EQ(cont_a, cont_b);
  // Epoch 2 replays epoch 1: the first batch after wrapping equals the very first batch.
  TokenLoader c(o);
  std::vector<int32_t> first;
  c.next(first, tg);
  while (c.position().epoch == 0) c.next(in, tg);
  EXPECT_EQ(in, first);
}

TEST(TokenLoader, AlignsSequencesToEot) {
  TempDir dir;
  const uint32_t eot = 99;
  std::mt19937 rng(5);
  std::vector<uint32_t> t;
  for (int d = 0; d < 200; ++d) {
    t.push_back(eot);
    size_t len = 3 + rng() % 40;
    for (size_t i = 0; i < len; ++i) t.push_back(rng() % 90);
  }
  ShardWriter w(dir.path(), "train", t.size());
  w.append(t);
  w.finish();
  LoaderOptions o;
  o.pattern = dir.path() + "/train_*.bin";
  o.batch_tokens = 64;
  o.world_size = 2;
  o.align_to_eot = true;
  o.seq_len = 16;
  o.eot_id = eot;
  for (int rank = 0; rank < 2; ++rank) {
    o.rank = rank;
    TokenLoader loader(o);
    std::vector<int32_t> in, tg;
    for (int step = 0; step < 10; ++step) {
      loader.next(in, tg);
      ASSERT_EQ(in.size(), 32u);
      for (size_t s = 0; s < 2; ++s) {
        EXPECT_EQ(in[s * 16], static_cast<int32_t>(eot)) << "sequence must start at a document";
        for (size_t i = 0; i + 1 < 16; ++i) EXPECT_EQ(tg[s * 16 + i], in[s * 16 + i + 1]);
      }
    }
  }
}

TEST(TokenLoader, BadInputIsAClearError) {
  TempDir dir;
  LoaderOptions o;
  o.batch_tokens = 8;
  o.pattern = dir.path() + "/nothing_*.bin";
  try {
    TokenLoader l(o);
    FAIL();
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("no token shards match"), std::string::npos);
  }
  make_shards(dir.path(), {100}, 500, 3);
  o.pattern = dir.path() + "/train_*.bin";
  o.vocab_size = 400;  // the shard holds ids up to 499
  try {
    TokenLoader l(o);
    FAIL();
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("outside the model's vocabulary"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("train_part0_000000.bin"), std::string::npos);
  }
  o.vocab_size = 0;
  o.world_size = 3;  // 8 is not divisible by 3
  EXPECT_THROW(TokenLoader{o}, InputError);
  o.world_size = 1;
  o.batch_tokens = 200;  // larger than the only shard
  TokenLoader l(o);
  std::vector<int32_t> in, tg;
  EXPECT_THROW(l.next(in, tg), InputError);
  LoaderPosition p;
  p.shard = 5;
  EXPECT_THROW(l.restore(p), InputError);
}

}  // namespace
}  // namespace nanogpt
