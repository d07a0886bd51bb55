// Integer helpers every layer uses: how many blocks of m cover x, and x rounded up to a
// multiple of m. One copy, so tile counts and padded extents agree wherever they are computed.
#pragma once

#include <cstdint>

namespace nanogpt {

// ⌈x / m⌉ for x >= 0, m > 0.
constexpr int64_t ceil_div(int64_t x, int64_t m) {
  return (x + m - 1) / m;
}

// The smallest multiple of m that is >= x, for x >= 0, m > 0.
constexpr int64_t round_up(int64_t x, int64_t m) {
  return ceil_div(x, m) * m;
}

}  // namespace nanogpt
