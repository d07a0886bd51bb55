// Open-addressing hash tables for the BPE hot loop: byte string -> token id, and
// (left id, right id) -> merged id. std::unordered_map costs an allocation per key and a
// pointer chase per probe; these are flat arrays probed linearly.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

namespace nanogpt {

inline constexpr uint32_t kNoToken = 0xFFFFFFFFu;

inline uint64_t hash_bytes(const char* p, size_t n) {
  uint64_t h = 0x9E3779B97F4A7C15ULL ^ (n * 0xFF51AFD7ED558CCDULL);
  while (n >= 8) {
    uint64_t w;
    std::memcpy(&w, p, 8);
    h = (h ^ w) * 0xBF58476D1CE4E5B9ULL;
    h ^= h >> 31;
    p += 8;
    n -= 8;
  }
  if (n != 0) {
    uint64_t w = 0;
    std::memcpy(&w, p, n);
    h = (h ^ w) * 0x94D049BB133111EBULL;
    h ^= h >> 29;
  }
  h *= 0xBF58476D1CE4E5B9ULL;
  return h ^ (h >> 32);
}

// Maps byte strings to ids. The table keeps its own copy of the strings in one arena (so it
// stays valid when its owner moves, and probes touch contiguous memory).
class TokenIdTable {
 public:
  void build(const std::vector<std::string>& tokens, uint32_t count);
  uint32_t find(std::string_view bytes) const {
    uint64_t mask = slots_.size() - 1;
    for (uint64_t i = hash_bytes(bytes.data(), bytes.size()) & mask;; i = (i + 1) & mask) {
      uint32_t id = slots_[i];
      if (id == kNoToken) return kNoToken;
      const uint32_t begin = offsets_[id], length = offsets_[id + 1] - begin;
      if (length == bytes.size() && std::memcmp(arena_.data() + begin, bytes.data(), length) == 0) {
        return id;
      }
    }
  }

 private:
  std::string arena_;              // all token bytes, concatenated
  std::vector<uint32_t> offsets_;  // token id -> start in arena_ (one extra at the end)
  std::vector<uint32_t> slots_;
};

// Maps an adjacent pair of token ids to the id of their concatenation, if that is a token.
class PairTable {
 public:
  void reserve(size_t count);
  void insert(uint32_t left, uint32_t right, uint32_t merged);
  uint32_t find(uint32_t left, uint32_t right) const {
    uint64_t key = (uint64_t(left) << 32) | right;
    uint64_t mask = keys_.size() - 1;
    for (uint64_t i = mix(key) & mask;; i = (i + 1) & mask) {
      if (keys_[i] == key) return values_[i];
      if (keys_[i] == kEmpty) return kNoToken;
    }
  }

 private:
  static constexpr uint64_t kEmpty = ~0ULL;
  static uint64_t mix(uint64_t k) {
    k ^= k >> 33;
    k *= 0xFF51AFD7ED558CCDULL;
    k ^= k >> 33;
    return k;
  }
  std::vector<uint64_t> keys_;
  std::vector<uint32_t> values_;
  size_t size_ = 0;
};

}  // namespace nanogpt
