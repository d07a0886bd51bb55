// The shape of attention's inputs per token: Hq query heads, then Hkv key heads and Hkv value
// heads, of D elements each, in one row of (Hq + 2·Hkv)·D values (the qkv projection's output).
#pragma once

#include <cstdint>
#include <string>

#include "config/config.hpp"
#include "runtime/error.hpp"

namespace nanogpt {

struct QkvShape {
  int64_t Hq = 0, Hkv = 0, D = 0;
  int64_t q_width() const { return Hq * D; }
  int64_t kv_width() const { return Hkv * D; }
  int64_t row() const { return (Hq + 2 * Hkv) * D; }
};

// The model's shape; Config::num_kv_heads = 0 means num_heads. An InputError if num_kv_heads
// does not divide num_heads.
inline QkvShape qkv_shape(const Config& c) {
  const int64_t kv = c.num_kv_heads == 0 ? c.num_heads : c.num_kv_heads;
  if (kv < 1 || c.num_heads % kv != 0) {
    throw InputError("num_kv_heads = " + std::to_string(c.num_kv_heads) +
                     " must divide num_heads = " + std::to_string(c.num_heads) +
                     " (1: multi-query; 0 or num_heads: one key/value head per query head)");
  }
  return {c.num_heads, kv, c.head_dim};
}

}  // namespace nanogpt
