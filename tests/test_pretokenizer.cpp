// Pre-tokenizer splits written out by hand from the GPT-2 pattern's leftmost-first semantics.
#include <gtest/gtest.h>

#include "data/gpt2_pretokenizer.hpp"

namespace nanogpt {
namespace {

std::vector<std::string> split(std::string_view s) {
  std::vector<std::string> out;
  split_gpt2_pieces(s, [&](std::string_view p) { out.emplace_back(p); });
  return out;
}

using Pieces = std::vector<std::string>;

TEST(Gpt2Pretokenizer, WordsNumbersPunctuation) {
  EXPECT_EQ(split("Hello world"), (Pieces{"Hello", " world"}));
  EXPECT_EQ(split("abc123def"), (Pieces{"abc", "123", "def"}));
  EXPECT_EQ(split("wait... what?!"), (Pieces{"wait", "...", " what", "?!"}));
  EXPECT_EQ(split(" 42"), (Pieces{" 42"}));
}

TEST(Gpt2Pretokenizer, Contractions) {
  EXPECT_EQ(split("it's"), (Pieces{"it", "'s"}));
  EXPECT_EQ(
      split("we'll they're I've I'm he'd don't"),
      (Pieces{"we", "'ll", " they", "'re", " I", "'ve", " I", "'m", " he", "'d", " don", "'t"}));
  // Upper case is not a contraction in GPT-2; the apostrophe is punctuation.
  EXPECT_EQ(split("IT'S"), (Pieces{"IT", "'", "S"}));
  // Inside a punctuation run the apostrophe is consumed by the run.
  EXPECT_EQ(split("!'s"), (Pieces{"!'", "s"}));
  EXPECT_EQ(split(" 's"), (Pieces{" '", "s"}));
}

TEST(Gpt2Pretokenizer, WhitespaceRuns) {
  // A run before a word gives its last space to the word.
  EXPECT_EQ(split("a   b"), (Pieces{"a", "  ", " b"}));
  // At the end of the text the whole run is one piece.
  EXPECT_EQ(split("a   "), (Pieces{"a", "   "}));
  // A newline before a word stays alone: \s+(?!\S) fails, \s+ takes one character.
  EXPECT_EQ(split("a\nb"), (Pieces{"a", "\n", "b"}));
  EXPECT_EQ(split("a\n\n b"), (Pieces{"a", "\n\n", " b"}));
  EXPECT_EQ(split("a \n\tb"), (Pieces{"a", " \n", "\t", "b"}));
}

TEST(Gpt2Pretokenizer, UnicodeClasses) {
  EXPECT_EQ(split("naïve café"), (Pieces{"naïve", " café"}));
  EXPECT_EQ(split("日本語テキスト"), (Pieces{"日本語テキスト"}));
  // Combining marks (Mn) are not letters.
  EXPECT_EQ(split("e\xcc\x81t"), (Pieces{"e", "\xcc\x81", "t"}));
  // ½ is a number (No), Ⅻ is a number (Nl).
  EXPECT_EQ(split("x½Ⅻ"), (Pieces{"x", "½Ⅻ"}));
  // U+3000 ideographic space is whitespace: it gives itself to the following word.
  EXPECT_EQ(split("a\xe3\x80\x80\xe3\x80\x80"
                  "b"),
            (Pieces{"a", "\xe3\x80\x80", "\xe3\x80\x80", "b"}));
  // Emoji are "other".
  EXPECT_EQ(split(" 🤖🤖 hi"), (Pieces{" 🤖🤖", " hi"}));
}

TEST(Gpt2Pretokenizer, PiecesConcatenateToInput) {
  std::string text = "Mixed: 123 apples, naïve 'quotes' \t\n  end  ";
  std::string joined;
  for (const auto& p : split(text)) joined += p;
  EXPECT_EQ(joined, text);
}

}  // namespace
}  // namespace nanogpt
