// The GPT-2 pre-tokenizer: splits text into the pieces that BPE merges never cross.
//
// Equivalent to matching this pattern leftmost-first, as tiktoken's `gpt2` encoding does:
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// with \s the Unicode White_Space property (tiktoken's Rust regex; JavaScript's \s differs on
// U+0085 and U+FEFF). Written as a hand-made scanner instead of a regex engine because it is
// the hot loop of encoding and a regex costs several times more.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "data/unicode_class.hpp"
#include "data/utf8.hpp"

namespace nanogpt {

namespace gpt2_pretokenizer_detail {

struct CodePoint {
  CharClass cls;
  uint8_t length;  // bytes
};

inline CodePoint code_point_at(std::string_view s, size_t i) {
  uint8_t c = static_cast<uint8_t>(s[i]);
  if (c < 0x80) {
    // Matches the generated tables for ASCII; \t\n\v\f\r and space are White_Space.
    CharClass cls = CharClass::kOther;
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) {
      cls = CharClass::kLetter;
    } else if (c >= '0' && c <= '9') {
      cls = CharClass::kNumber;
    } else if (c == ' ' || (c >= 0x09 && c <= 0x0D)) {
      cls = CharClass::kWhitespace;
    }
    return {cls, 1};
  }
  uint32_t cp = 0;
  int len = decode_utf8(s, i, &cp);
  // Invalid bytes are rejected before pre-tokenization; if one slips through, treat it as a
  // one-byte "other" so the scanner still terminates.
  if (len == 0) return {CharClass::kOther, 1};
  return {classify_code_point(cp), static_cast<uint8_t>(len)};
}

inline size_t contraction_length(std::string_view s, size_t i) {
  // s[i] == '\''. The alternatives 's 't 're 've 'm 'll 'd are case-sensitive in GPT-2.
  if (i + 1 >= s.size()) return 0;
  char a = s[i + 1];
  if (a == 's' || a == 't' || a == 'm' || a == 'd') return 2;
  if (i + 2 >= s.size()) return 0;
  char b = s[i + 2];
  if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return 3;
  return 0;
}

inline size_t run_end(std::string_view s, size_t i, CharClass cls) {
  while (i < s.size()) {
    CodePoint cp = code_point_at(s, i);
    if (cp.cls != cls) break;
    i += cp.length;
  }
  return i;
}

// End of the piece that starts at `i`.
inline size_t piece_end(std::string_view s, size_t i) {
  const size_t n = s.size();
  if (s[i] == '\'') {
    size_t len = contraction_length(s, i);
    if (len != 0) return i + len;
  }
  CodePoint here = code_point_at(s, i);
  if (s[i] == ' ' && i + 1 < n) {
    CodePoint next = code_point_at(s, i + 1);
    if (next.cls != CharClass::kWhitespace) return run_end(s, i + 1, next.cls);
  }
  if (here.cls != CharClass::kWhitespace) return run_end(s, i, here.cls);

  // A whitespace run. At the end of text it is one piece; before other text it gives up its
  // last character, which then leads the next piece (`\s+(?!\S)`), unless it is a single
  // character (`\s+`).
  size_t j = i;
  size_t last_start = i;
  while (j < n) {
    CodePoint cp = code_point_at(s, j);
    if (cp.cls != CharClass::kWhitespace) break;
    last_start = j;
    j += cp.length;
  }
  if (j == n || last_start == i) return j;
  return last_start;
}

}  // namespace gpt2_pretokenizer_detail

// Calls emit(std::string_view piece) for each piece of `text`, in order; the pieces
// concatenate to `text`.
template <class Emit>
void split_gpt2_pieces(std::string_view text, Emit&& emit) {
  size_t i = 0;
  while (i < text.size()) {
    size_t end = gpt2_pretokenizer_detail::piece_end(text, i);
    emit(text.substr(i, end - i));
    i = end;
  }
}

}  // namespace nanogpt
