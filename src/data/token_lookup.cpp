#include "data/token_lookup.hpp"

#include <bit>

namespace nanogpt {

void TokenIdTable::build(const std::vector<std::string>& tokens, uint32_t count) {
  arena_.clear();
  offsets_.assign(1, 0);
  for (uint32_t id = 0; id < count; ++id) {
    arena_ += tokens[id];
    offsets_.push_back(static_cast<uint32_t>(arena_.size()));
  }
  size_t capacity = std::bit_ceil(static_cast<size_t>(count) * 2 + 16);
  slots_.assign(capacity, kNoToken);
  uint64_t mask = capacity - 1;
  for (uint32_t id = 0; id < count; ++id) {
    const std::string& t = tokens[id];
    uint64_t i = hash_bytes(t.data(), t.size()) & mask;
    while (slots_[i] != kNoToken) i = (i + 1) & mask;
    slots_[i] = id;
  }
}

void PairTable::reserve(size_t count) {
  size_t capacity = std::bit_ceil(count * 2 + 16);
  keys_.assign(capacity, kEmpty);
  values_.assign(capacity, kNoToken);
  size_ = 0;
}

void PairTable::insert(uint32_t left, uint32_t right, uint32_t merged) {
  uint64_t key = (uint64_t(left) << 32) | right;
  uint64_t mask = keys_.size() - 1;
  uint64_t i = mix(key) & mask;
  while (keys_[i] != kEmpty && keys_[i] != key) i = (i + 1) & mask;
  if (keys_[i] == kEmpty) ++size_;
  keys_[i] = key;
  values_[i] = merged;
}

}  // namespace nanogpt
