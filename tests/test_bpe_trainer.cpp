#include <gtest/gtest.h>

#include <random>

#include "data/bpe_trainer.hpp"
#include "runtime/error.hpp"
#include "runtime/file_io.hpp"
#include "runtime/sha256.hpp"
#include "support/fixtures.hpp"

namespace nanogpt {
namespace {

std::string random_corpus(uint32_t seed, int docs) {
  std::mt19937 rng(seed);
  const char* words[] = {"the",     "cat",   "sat",  "on",   "mat", "and",  "then",  "ran", "away",
                         "quickly", "naïve", "café", "日本", "42",  "it's", "don't", "!!",  "..."};
  std::string out;
  for (int d = 0; d < docs; ++d) {
    int n = 5 + static_cast<int>(rng() % 30);
    for (int i = 0; i < n; ++i) {
      out += words[rng() % std::size(words)];
      out += (rng() % 7 == 0) ? "\n" : " ";
    }
    out += "\n%\n";
  }
  return out;
}

CorpusOptions corpus_in(const TempDir& dir, const std::string& text) {
  write_file_atomic(dir.path() + "/corpus.txt", text);
  CorpusOptions c;
  c.files = {dir.path() + "/corpus.txt"};
  c.doc_separator = "%";
  return c;
}

TEST(BpeTrainer, DeterministicByteIdenticalOutput) {
  TempDir dir;
  auto corpus = corpus_in(dir, random_corpus(1, 300));
  BpeTrainOptions o;
  o.vocab_size = 300;
  std::string a = train_bpe(corpus, o, nullptr).to_json();
  std::string b = train_bpe(corpus, o, nullptr).to_json();
  EXPECT_EQ(a, b);
  // And the written file loads back to the same tokenizer.
  write_file_atomic(dir.path() + "/tok.json", a);
  BpeTokenizer loaded = BpeTokenizer::load(dir.path() + "/tok.json");
  EXPECT_EQ(loaded.to_json(), a);
  EXPECT_EQ(loaded.vocab_size(), 300u);
  EXPECT_EQ(loaded.eot_id(), 295u);  // the four chat tokens follow it
}

// sha256 of the 300-token tokenizer trained on random_corpus(1, 300) by the trainer as it was
// before the chat tokens (revision b49b198).
constexpr const char* kTokenizerBeforeChatTokens =
    "e950fb4325aef7c77b32e82185c60580790e40871a9ff96ea0ad42aa11620b79";

TEST(BpeTrainer, WithoutChatTokensTheTokenizerIsTheOneOfBefore) {
  TempDir dir;
  auto corpus = corpus_in(dir, random_corpus(1, 300));
  BpeTrainOptions o;
  o.vocab_size = 300;
  o.chat_tokens = false;
  const BpeTokenizer t = train_bpe(corpus, o, nullptr);
  EXPECT_EQ(sha256_hex(t.to_json()), kTokenizerBeforeChatTokens);
  ASSERT_EQ(t.special_tokens().size(), 1u);
  EXPECT_EQ(t.eot_id(), 299u);
  EXPECT_FALSE(t.find_special(kUserStart).has_value());
}

TEST(BpeTrainer, ChatTokensTakeTheLastFourIdsAfterEndOfText) {
  TempDir dir;
  auto corpus = corpus_in(dir, random_corpus(1, 300));
  BpeTrainOptions o;
  o.vocab_size = 300;
  BpeTrainReport report;
  const BpeTokenizer t = train_bpe(corpus, o, &report);
  EXPECT_EQ(t.vocab_size(), 300u);
  EXPECT_EQ(report.merges, 300u - 256 - 5);
  ASSERT_EQ(t.special_tokens().size(), 5u);
  EXPECT_EQ(t.eot_id(), 295u);
  for (size_t k = 0; k < kChatSpecialTokens.size(); ++k) {
    EXPECT_EQ(t.special_tokens()[k + 1].text, kChatSpecialTokens[k]);
    EXPECT_EQ(t.find_special(kChatSpecialTokens[k]), 296u + k);
  }
  // The merges are those of a vocabulary four smaller without them: training does not change.
  o.vocab_size = 296;
  o.chat_tokens = false;
  EXPECT_EQ(t.merges(), train_bpe(corpus, o, nullptr).merges());
  // The file keeps every special token with its id.
  write_file_atomic(dir.path() + "/tok.json", t.to_json());
  const BpeTokenizer loaded = BpeTokenizer::load(dir.path() + "/tok.json");
  ASSERT_EQ(loaded.special_tokens().size(), 5u);
  for (size_t k = 0; k < 5; ++k) {
    EXPECT_EQ(loaded.special_tokens()[k].text, t.special_tokens()[k].text);
    EXPECT_EQ(loaded.special_tokens()[k].id, t.special_tokens()[k].id);
  }
  // And with allow_special their text becomes their ids.
  EXPECT_EQ(loaded.encode("<|assistant_end|>", true), std::vector<uint32_t>{299u});
}

TEST(BpeTrainer, SmallestVocabularyCountsTheChatTokens) {
  TempDir dir;
  auto corpus = corpus_in(dir, "ab ab ab\n");
  BpeTrainOptions o;
  o.vocab_size = 260;
  try {
    train_bpe(corpus, o, nullptr);
    FAIL() << "expected an error";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("at least 261"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("--no-chat-tokens"), std::string::npos) << e.what();
  }
  o.vocab_size = 261;
  EXPECT_EQ(train_bpe(corpus, o, nullptr).merges().size(), 0u);
  o.vocab_size = 257;
  o.chat_tokens = false;
  EXPECT_EQ(train_bpe(corpus, o, nullptr).vocab_size(), 257u);
}

TEST(BpeTrainer, FirstMergeIsMostFrequentPairWithSmallestIdOnTies) {
  TempDir dir;
  // Newlines are pieces of their own, so the only pairs are (a,b) and (c,d), 3 times each: a
  // tie broken by the smaller pair (97,98).
  auto corpus = corpus_in(dir, "ab\nab\nab\ncd\ncd\ncd\nxy\n");
  BpeTrainOptions o;
  o.vocab_size = 263;  // two merges, then five special tokens
  BpeTokenizer t = train_bpe(corpus, o, nullptr);
  ASSERT_EQ(t.merges().size(), 2u);
  EXPECT_EQ(t.merges()[0], (std::pair<uint32_t, uint32_t>{'a', 'b'}));
  EXPECT_EQ(t.merges()[1], (std::pair<uint32_t, uint32_t>{'c', 'd'}));
}

TEST(BpeTrainer, MergesNeverCrossPiecesOrDocuments) {
  TempDir dir;
  // "a" ends one document and "b" starts the next; "x.y" pieces are split by punctuation.
  auto corpus = corpus_in(dir, "a\n%\nb\n%\na\n%\nb\n%\nx.y x.y x.y\n");
  BpeTrainOptions o;
  o.vocab_size = 300;
  BpeTrainReport report;
  BpeTokenizer t = train_bpe(corpus, o, &report);
  for (uint32_t id = 256; id < t.ordinary_count(); ++id) {
    std::string_view s = t.token_bytes(id);
    EXPECT_NE(s, "ab");
    EXPECT_EQ(s.find("x."), std::string_view::npos);
    EXPECT_EQ(s.find(".y"), std::string_view::npos);
  }
  EXPECT_TRUE(report.ran_out_of_pairs);
  EXPECT_EQ(report.corpus.documents, 5u);
}

TEST(BpeTrainer, EncodeDecodeRoundTripsArbitraryText) {
  TempDir dir;
  auto corpus = corpus_in(dir, random_corpus(2, 200));
  BpeTrainOptions o;
  o.vocab_size = 300;
  BpeTokenizer t = train_bpe(corpus, o, nullptr);
  std::mt19937 rng(3);
  for (int trial = 0; trial < 200; ++trial) {
    std::string text = random_corpus(rng(), 1).substr(0, rng() % 200);
    // Cut at a character boundary so the text stays valid UTF-8.
    while (!text.empty() && (static_cast<uint8_t>(text.back()) & 0xC0) == 0x80) text.pop_back();
    while (!text.empty() && (static_cast<uint8_t>(text.back()) & 0x80)) text.pop_back();
    auto ids = t.encode(text, true);
    EXPECT_EQ(t.decode(ids), text);
  }
  // Learned merges shorten the encoding of in-distribution text.
  std::string sample = "the cat sat on the mat and then ran away quickly";
  EXPECT_LT(t.encode(sample, false).size(), sample.size() / 2);
}

TEST(BpeTrainer, RejectsBadInput) {
  TempDir dir;
  BpeTrainOptions o;
  o.vocab_size = 100;
  auto corpus = corpus_in(dir, "hello");
  EXPECT_THROW(train_bpe(corpus, o, nullptr), InputError);
  o.vocab_size = 300;
  auto bad = corpus_in(dir, "ok\n%\nbad \xff byte\n");
  try {
    train_bpe(bad, o, nullptr);
    FAIL();
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("corpus.txt"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("line 3"), std::string::npos) << e.what();
  }
  auto empty = corpus_in(dir, "\n%\n  \n%\n");
  EXPECT_THROW(train_bpe(empty, o, nullptr), InputError);
}

TEST(TokenizerFile, MalformedFilesAreRefused) {
  TempDir dir;
  const std::string p = dir.path() + "/t.json";
  write_file_atomic(p, "{not json");
  EXPECT_THROW(BpeTokenizer::load(p), InputError);
  write_file_atomic(p, R"({"format":"other"})");
  EXPECT_THROW(BpeTokenizer::load(p), InputError);
  write_file_atomic(
      p,
      R"({"format":"nanogpt-bpe","version":1,"pretokenizer":"gpt2","merges":[[300,1]],"special_tokens":{}})");
  EXPECT_THROW(BpeTokenizer::load(p), InputError);
  write_file_atomic(
      p,
      R"({"format":"nanogpt-bpe","version":1,"pretokenizer":"gpt2","merges":[[97,98]],"special_tokens":{"<|endoftext|>":300}})");
  EXPECT_THROW(BpeTokenizer::load(p), InputError);
}

}  // namespace
}  // namespace nanogpt
