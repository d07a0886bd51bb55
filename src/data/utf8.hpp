// Strict UTF-8 decoding (RFC 3629: no overlongs, no surrogates, nothing above U+10FFFF).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace nanogpt {

// Decodes the code point starting at s[i]; returns its byte length, or 0 if the bytes there
// are not valid UTF-8.
inline int decode_utf8(std::string_view s, size_t i, uint32_t* cp) {
  auto b = [&](size_t k) { return static_cast<uint8_t>(s[k]); };
  uint8_t c0 = b(i);
  if (c0 < 0x80) {
    *cp = c0;
    return 1;
  }
  size_t left = s.size() - i;
  auto cont = [&](size_t k) { return (b(k) & 0xC0) == 0x80; };
  if (c0 >= 0xC2 && c0 <= 0xDF) {
    if (left < 2 || !cont(i + 1)) return 0;
    *cp = (uint32_t(c0 & 0x1F) << 6) | (b(i + 1) & 0x3F);
    return 2;
  }
  if (c0 >= 0xE0 && c0 <= 0xEF) {
    if (left < 3 || !cont(i + 1) || !cont(i + 2)) return 0;
    uint32_t v = (uint32_t(c0 & 0x0F) << 12) | (uint32_t(b(i + 1) & 0x3F) << 6) | (b(i + 2) & 0x3F);
    if (v < 0x800 || (v >= 0xD800 && v <= 0xDFFF)) return 0;
    *cp = v;
    return 3;
  }
  if (c0 >= 0xF0 && c0 <= 0xF4) {
    if (left < 4 || !cont(i + 1) || !cont(i + 2) || !cont(i + 3)) return 0;
    uint32_t v = (uint32_t(c0 & 0x07) << 18) | (uint32_t(b(i + 1) & 0x3F) << 12) |
                 (uint32_t(b(i + 2) & 0x3F) << 6) | (b(i + 3) & 0x3F);
    if (v < 0x10000 || v > 0x10FFFF) return 0;
    *cp = v;
    return 4;
  }
  return 0;
}

// Offset of the first byte that is not valid UTF-8, or npos if the whole text is valid.
size_t find_invalid_utf8(std::string_view s);

// The text with each byte that does not start a valid UTF-8 character replaced by U+FFFD, for
// model output (sampled tokens may stop inside a character) shown or stored as text.
std::string valid_utf8(std::string_view s);

}  // namespace nanogpt
