// The built-in fortunes suites (eval/fortunes_suites) on crafted documents and shards: held-out
// documents read back from validation shards exactly, bits-per-byte cases in shard order,
// HellaSwag-style choice cases whose gold choice is the fortune's real ending and whose
// distractors are other fortunes' endings, the same for the same seed.
#include <gtest/gtest.h>

#include <set>

#include "data/token_shard.hpp"
#include "eval/fortunes_suites.hpp"
#include "runtime/error.hpp"
#include "runtime/file_io.hpp"
#include "support/fixtures.hpp"

namespace nanogpt {
namespace {

BpeTokenizer byte_tokenizer() {
  return BpeTokenizer::from_merges({}, {"<|endoftext|>"});
}

std::vector<std::string> crafted_fortunes(size_t n) {
  std::vector<std::string> out;
  for (size_t i = 0; i < n; ++i) {
    std::string f = "Fortune " + std::to_string(i) + " says that";
    for (size_t k = 0; k < i % 7; ++k) f += " words";
    f += " and ends with number " + std::to_string(i * 31 % 97) + ".";
    out.push_back(f);
  }
  return out;
}

TEST(EvalFortunes, ShardDocumentsAreTheDecodedHeldOutDocuments) {
  TempDir dir;
  const BpeTokenizer tok = byte_tokenizer();
  const auto docs = crafted_fortunes(12);
  ShardWriter w(dir.path(), "val", 100);  // several shards: documents cross shard boundaries
  for (const std::string& d : docs) {
    std::vector<uint32_t> ids = {tok.eot_id()};
    tok.encode_append(d, false, ids);
    w.append(ids);
  }
  w.finish();
  ASSERT_GT(glob_sorted(dir.path() + "/val_*.bin").size(), 2u);
  // The shards are one stream: documents that continue into the next file come back whole.
  EXPECT_EQ(shard_documents(dir.path() + "/val_*.bin", tok), docs);
  EXPECT_THROW(shard_documents(dir.path() + "/none_*.bin", tok), InputError);
}

TEST(EvalFortunes, BitsPerByteSuiteTakesHeldOutFortunesInOrder) {
  const auto docs = crafted_fortunes(30);
  FortunesSuiteOptions o;
  o.cases = 10;
  o.min_bytes = 45;
  o.tokenizer = "tok.json";
  const Suite s = make_fortunes_bpb_suite(docs, o);
  ASSERT_EQ(s.cases.size(), 10u);
  EXPECT_EQ(s.name, "fortunes-bpb");
  EXPECT_EQ(s.tokenizer, "tok.json");
  size_t next = 0;
  for (const SuiteCase& c : s.cases) {
    EXPECT_EQ(c.kind, CaseKind::kText);
    while (docs[next].size() < 45) ++next;
    EXPECT_EQ(c.text, docs[next]);
    ++next;
  }
  o.cases = 1000;
  EXPECT_THROW(make_fortunes_bpb_suite(docs, o), InputError);
}

TEST(EvalFortunes, ChoiceCasesHaveTheRealEndingAsGoldAndOtherFortunesAsDistractors) {
  const auto docs = crafted_fortunes(60);
  FortunesSuiteOptions o;
  o.cases = 25;
  o.seed = 3;
  const Suite s = make_fortunes_choice_suite(docs, o);
  ASSERT_EQ(s.cases.size(), 25u);
  std::set<std::string> contexts;
  for (const SuiteCase& c : s.cases) {
    ASSERT_EQ(c.choices.size(), 4u);
    const std::string real = c.context + c.choices[static_cast<size_t>(c.gold)];
    EXPECT_NE(std::find(docs.begin(), docs.end(), real), docs.end()) << real;
    std::set<std::string> distinct(c.choices.begin(), c.choices.end());
    EXPECT_EQ(distinct.size(), 4u);
    for (size_t k = 0; k < 4; ++k) {
      EXPECT_EQ(c.choices[k].front(), ' ');  // endings keep the space they were cut at
      if (static_cast<int64_t>(k) == c.gold) continue;
      // A distractor is the ending of another fortune, not of this one.
      bool found = false;
      for (const std::string& d : docs) {
        found = found ||
                (d != real && d.size() > c.choices[k].size() &&
                 d.compare(d.size() - c.choices[k].size(), std::string::npos, c.choices[k]) == 0);
      }
      EXPECT_TRUE(found) << c.choices[k];
    }
    contexts.insert(c.context);
  }
  EXPECT_EQ(contexts.size(), 25u);  // distinct fortunes
  // Seeded: the same seed, the same suite; another, another.
  EXPECT_EQ(suite_json(make_fortunes_choice_suite(docs, o)), suite_json(s));
  o.seed = 4;
  EXPECT_NE(suite_json(make_fortunes_choice_suite(docs, o)), suite_json(s));
  // Gold positions vary.
  std::set<int64_t> golds;
  for (const SuiteCase& c : s.cases) golds.insert(c.gold);
  EXPECT_GT(golds.size(), 2u);
}

}  // namespace
}  // namespace nanogpt
