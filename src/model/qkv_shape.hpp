// The shape of attention's inputs per token: Hq query heads, then Hkv key heads and Hkv value
// heads, of D elements each, in one row of (Hq + 2·Hkv)·D values (the qkv projection's output).
#pragma once

#include <cstdint>

#include "model/config.hpp"

namespace nanogpt {

struct QkvShape {
  int64_t Hq = 0, Hkv = 0, D = 0;
  int64_t q_width() const { return Hq * D; }
  int64_t kv_width() const { return Hkv * D; }
  int64_t row() const { return (Hq + 2 * Hkv) * D; }
};

inline QkvShape qkv_shape(const Config& c) {
  return {c.num_heads, c.num_heads, c.head_dim};
}

}  // namespace nanogpt
