#include "data/unicode_class.hpp"

#include <algorithm>
#include <array>
#include <iterator>

namespace nanogpt {

namespace {

struct CodePointRange {
  uint32_t first;
  uint32_t last;
};

#include "data/unicode_tables.inc"

template <size_t N>
bool in_ranges(const CodePointRange (&ranges)[N], uint32_t cp) {
  auto it = std::upper_bound(std::begin(ranges), std::end(ranges), cp,
                             [](uint32_t c, const CodePointRange& r) { return c < r.first; });
  return it != std::begin(ranges) && cp <= std::prev(it)->last;
}

CharClass classify_slow(uint32_t cp) {
  if (in_ranges(kLetterRanges, cp)) return CharClass::kLetter;
  if (in_ranges(kNumberRanges, cp)) return CharClass::kNumber;
  if (in_ranges(kWhitespaceRanges, cp)) return CharClass::kWhitespace;
  return CharClass::kOther;
}

// The Basic Multilingual Plane covers nearly all text; a 64 KiB table makes it one load.
// Code points above it fall back to binary search.
const std::array<CharClass, 0x10000>& bmp_table() {
  static const auto table = [] {
    std::array<CharClass, 0x10000> t{};
    for (uint32_t cp = 0; cp < 0x10000; ++cp) t[cp] = classify_slow(cp);
    return t;
  }();
  return table;
}

}  // namespace

CharClass classify_code_point(uint32_t cp) {
  if (cp < 0x10000) return bmp_table()[cp];
  return classify_slow(cp);
}

}  // namespace nanogpt
