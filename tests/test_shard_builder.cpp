#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "data/shard_builder.hpp"
#include "data/token_shard.hpp"
#include "runtime/error.hpp"
#include "runtime/file_io.hpp"
#include "support/fixtures.hpp"

namespace nanogpt {
namespace {

BpeTokenizer small_tokenizer() {
  return BpeTokenizer::from_merges({{'t', 'h'}, {256, 'e'}, {' ', 257}}, {std::string(kEndOfText)});
}

std::vector<uint16_t> read_tokens(const std::string& path) {
  MappedFile m(path);
  auto t = shard_tokens(m);
  return {t.begin(), t.end()};
}

// Splits a token stream at EOT tokens into decoded documents.
std::vector<std::string> documents_of(const BpeTokenizer& tok,
                                      const std::vector<uint16_t>& tokens) {
  std::vector<std::string> docs;
  std::vector<uint32_t> cur;
  bool started = false;
  for (uint16_t t : tokens) {
    if (t == tok.eot_id()) {
      if (started) docs.push_back(tok.decode(cur));
      cur.clear();
      started = true;
    } else {
      cur.push_back(t);
    }
  }
  if (started) docs.push_back(tok.decode(cur));
  return docs;
}

TEST(ShardBuilder, ValidationSelectionIsExactAndSpread) {
  for (uint64_t total : {1u, 7u, 100u, 12345u}) {
    for (uint64_t n : {0u, 1u, 3u, 50u}) {
      if (n > total) continue;
      uint64_t count = 0, first = total, last = 0;
      for (uint64_t k = 0; k < total; ++k) {
        if (is_validation_document(k, n, total)) {
          ++count;
          first = std::min(first, k);
          last = std::max(last, k);
        }
      }
      EXPECT_EQ(count, n);
      if (n >= 2) {
        EXPECT_GT(last - first, total / 2);  // not bunched at one end
      }
    }
  }
}

TEST(ShardBuilder, TextWithSeparatorEndToEnd) {
  TempDir dir;
  std::string text;
  std::vector<std::string> docs;
  for (int i = 0; i < 40; ++i) {
    docs.push_back("the " + std::to_string(i) + " thing\nsecond line <|endoftext|> literal");
    text += docs.back() + "\n%\n";
  }
  text += "   \n%\n";  // an empty document: skipped and counted
  write_file_atomic(dir.path() + "/in.txt", text);
  ShardBuildOptions o;
  o.corpus.files = {dir.path() + "/in.txt"};
  o.corpus.doc_separator = "%";
  o.output_dir = dir.path() + "/out";
  o.val_docs = 4;
  o.shard_tokens = 200;
  BpeTokenizer tok = small_tokenizer();
  ShardBuildResult r = build_token_shards(tok, o);
  EXPECT_EQ(r.corpus.documents, 40u);
  EXPECT_EQ(r.corpus.empty_documents, 1u);
  EXPECT_EQ(r.val_documents, 4u);
  EXPECT_EQ(r.train_documents, 36u);
  EXPECT_GT(r.train_shards.size(), 1u);  // 200 tokens per shard forces a split

  std::vector<uint16_t> train, val;
  for (const auto& s : r.train_shards) {
    auto t = read_tokens(o.output_dir + "/" + s);
    train.insert(train.end(), t.begin(), t.end());
  }
  for (const auto& s : r.val_shards) {
    auto t = read_tokens(o.output_dir + "/" + s);
    val.insert(val.end(), t.begin(), t.end());
  }
  EXPECT_EQ(train.size(), r.train_tokens);
  EXPECT_EQ(train.front(), tok.eot_id());  // every document is preceded by EOT
  std::vector<std::string> got_train = documents_of(tok, train), got_val = documents_of(tok, val);
  ASSERT_EQ(got_train.size() + got_val.size(), 40u);
  // Documents come back in order, split between the two sets; the literal special text inside
  // documents was encoded as ordinary text.
  size_t ti = 0, vi = 0;
  for (uint64_t k = 0; k < 40; ++k) {
    if (is_validation_document(k, 4, 40)) {
      EXPECT_EQ(got_val[vi++], docs[k]);
    } else {
      EXPECT_EQ(got_train[ti++], docs[k]);
    }
  }
  auto meta = nlohmann::json::parse(read_file(o.output_dir + "/meta.json"));
  EXPECT_EQ(meta["tokens"]["train"], r.train_tokens);
  EXPECT_EQ(meta["tokenizer"]["eot_id"], tok.eot_id());
  EXPECT_EQ(meta["documents"]["empty_skipped"], 1);

  // A second run with bigger shards removes the now-stale extra shards.
  o.shard_tokens = 100000;
  ShardBuildResult r2 = build_token_shards(tok, o);
  EXPECT_EQ(r2.train_shards.size(), 1u);
  EXPECT_EQ(glob_sorted(o.output_dir + "/train_*.bin").size(), 1u);
}

TEST(ShardBuilder, JsonLinesInput) {
  TempDir dir;
  write_file_atomic(dir.path() + "/docs.jsonl",
                    "{\"text\": \"the first\", \"id\": 1}\n{\"text\": \"\"}\n{\"text\": \"thé "
                    "second\\nline\"}\n");
  ShardBuildOptions o;
  o.corpus.files = {dir.path() + "/docs.jsonl"};
  o.output_dir = dir.path() + "/out";
  o.val_docs = 0;
  BpeTokenizer tok = small_tokenizer();
  ShardBuildResult r = build_token_shards(tok, o);
  EXPECT_EQ(r.corpus.documents, 2u);
  EXPECT_EQ(r.corpus.empty_documents, 1u);
  auto docs = documents_of(tok, read_tokens(o.output_dir + "/train_000000.bin"));
  EXPECT_EQ(docs, (std::vector<std::string>{"the first", "thé second\nline"}));

  write_file_atomic(dir.path() + "/bad.jsonl", "{\"text\": \"ok\"}\n{\"body\": \"no text\"}\n");
  o.corpus.files = {dir.path() + "/bad.jsonl"};
  try {
    build_token_shards(tok, o);
    FAIL();
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("bad.jsonl:2"), std::string::npos) << e.what();
  }
}

TEST(ShardBuilder, RefusesVocabularyOver65536) {
  std::vector<std::pair<uint32_t, uint32_t>> merges;
  for (uint32_t a = 0; a < 256 && merges.size() < 65300; ++a) {
    for (uint32_t b = 0; b < 256 && merges.size() < 65300; ++b) merges.emplace_back(a, b);
  }
  BpeTokenizer big = BpeTokenizer::from_merges(merges, {std::string(kEndOfText)});
  ASSERT_GT(big.vocab_size(), 65536u);
  TempDir dir;
  write_file_atomic(dir.path() + "/in.txt", "hello");
  ShardBuildOptions o;
  o.corpus.files = {dir.path() + "/in.txt"};
  o.output_dir = dir.path() + "/out";
  try {
    build_token_shards(big, o);
    FAIL();
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("65536"), std::string::npos);
  }
}

TEST(ShardBuilder, InvalidUtf8NamesFileAndLine) {
  TempDir dir;
  write_file_atomic(dir.path() + "/in.txt", "fine\n%\nstill fine\n%\nbroken \xc3\x28 here\n");
  ShardBuildOptions o;
  o.corpus.files = {dir.path() + "/in.txt"};
  o.corpus.doc_separator = "%";
  o.output_dir = dir.path() + "/out";
  try {
    build_token_shards(small_tokenizer(), o);
    FAIL();
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("in.txt:5"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("byte offset 7"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(file_exists(o.output_dir + "/meta.json"));
}

}  // namespace
}  // namespace nanogpt
