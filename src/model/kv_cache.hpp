// The keys and values of the positions a decoder has run, per attention layer, and each
// position's document: what the model's forward needs to run T new tokens after them
// (GptT::forward_cached) with the same block code as training. Keys are stored after the norm
// and rotation, values after the value-embedding mix, exactly as attention reads them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "config/config.hpp"
#include "model/qkv_shape.hpp"
#include "runtime/aligned_memory.hpp"
#include "runtime/error.hpp"
#include "runtime/integer_math.hpp"

namespace nanogpt {

template <class Real>
class KvCacheT {
 public:
  // Room for `capacity` positions; K/V rows of H_kv·D per attention layer, all in one block
  // left uninitialized: a forward writes every row before attention reads it (it reads rows
  // below length() + the rows being stored, attention_forward.cpp), so only the positions a
  // sequence reaches are ever touched. Zero-filling the whole capacity first cost a page fault
  // per 4 KiB of it: ~7% of a 100-case fortunes-choice run's calling thread (perf), whose
  // per-choice caches were mostly room to spare.
  KvCacheT(const Config& config, int64_t capacity) : KvCacheT(config, capacity, nullptr) {}
  // The same over `storage` (storage_bytes(config, capacity) bytes, 64-byte aligned), which
  // the caller owns and keeps alive as long as the cache: ModelScorer carves all caches of a
  // call out of one arena it reuses.
  KvCacheT(const Config& config, int64_t capacity, std::byte* storage)
      : capacity_(capacity), width_(qkv_shape(config).kv_width()) {
    if (capacity < 1) {
      throw InputError("a K/V cache needs room for at least one token (asked for " +
                       std::to_string(capacity) + ")");
    }
    const int64_t rows = capacity * width_;
    int64_t layers = 0;
    offset_.assign(static_cast<size_t>(config.num_layers), -1);
    for (int64_t i = 0; i < config.num_layers; ++i) {
      if (config.has_attention(i)) offset_[static_cast<size_t>(i)] = 2 * rows * layers++;
    }
    bytes_ = key_value_bytes(config, capacity);
    base_ = reinterpret_cast<Real*>(
        storage != nullptr ? storage
                           : static_cast<std::byte*>(own_.reserve(static_cast<size_t>(bytes_))));
    doc_.assign(static_cast<size_t>(capacity), 0);
  }
  // Bytes of keys and values a cache of `capacity` positions holds, rounded up to whole cache
  // lines (so caches placed end to end in one arena each start on one).
  static int64_t storage_bytes(const Config& config, int64_t capacity) {
    return round_up(key_value_bytes(config, capacity), static_cast<int64_t>(kCacheLine));
  }

  int64_t length() const { return length_; }      // positions cached
  int64_t capacity() const { return capacity_; }  // positions it can hold
  int64_t width() const { return width_; }        // elements of one K (or V) row
  // Bytes of keys and values held for the full capacity (what grouped-query attention shrinks).
  int64_t bytes() const { return bytes_; }

  // Layer `layer`'s keys and values, [capacity, width] rows (null for a layer without
  // attention); the document of each position.
  const Real* k(int64_t layer) const { return block(layer); }
  const Real* v(int64_t layer) const {
    const Real* b = block(layer);
    return b == nullptr ? nullptr : b + capacity_ * width_;
  }
  const int32_t* doc() const { return doc_.data(); }
  int32_t* doc() { return doc_.data(); }

  // Copies T rows of keys and values (row strides ld) to positions [length, length + T).
  void store(int64_t layer, int64_t T, const Real* k, const Real* v, int64_t ld) {
    Real* kc = block(layer) + length_ * width_;
    Real* vc = kc + capacity_ * width_;
    for (int64_t t = 0; t < T; ++t) {
      std::memcpy(kc + t * width_, k + t * ld, static_cast<size_t>(width_) * sizeof(Real));
      std::memcpy(vc + t * width_, v + t * ld, static_cast<size_t>(width_) * sizeof(Real));
    }
  }
  // The T positions stored by the last forward become part of the past.
  void advance(int64_t T) { length_ += T; }
  // Empty again, keeping the storage (a forward overwrites every row and document it reads).
  void clear() { length_ = 0; }
  // This cache holds what `src` holds: its positions' keys, values and documents are copied
  // (only those: a branch of a short prompt costs its length, not the capacity), into storage
  // that must fit them and rows of the same width.
  void copy_from(const KvCacheT& src) {
    bool same_layers = src.offset_.size() == offset_.size();
    for (size_t i = 0; same_layers && i < offset_.size(); ++i) {
      same_layers = (src.offset_[i] < 0) == (offset_[i] < 0);
    }
    if (src.width_ != width_ || src.length_ > capacity_ || !same_layers) {
      throw InputError("a K/V cache of " + std::to_string(src.length_) + " positions of width " +
                       std::to_string(src.width_) + " does not fit one of " +
                       std::to_string(capacity_) + " positions of width " + std::to_string(width_) +
                       " (caches of another model, or too small)");
    }
    const size_t n = static_cast<size_t>(src.length_ * width_);
    for (size_t i = 0; i < offset_.size(); ++i) {
      const auto layer = static_cast<int64_t>(i);
      if (offset_[i] < 0) continue;
      std::memcpy(block(layer), src.k(layer), n * sizeof(Real));
      std::memcpy(block(layer) + capacity_ * width_, src.v(layer), n * sizeof(Real));
    }
    std::memcpy(doc_.data(), src.doc_.data(), static_cast<size_t>(src.length_) * sizeof(int32_t));
    length_ = src.length_;
  }

 private:
  // A key and a value row per position and attention layer.
  static int64_t key_value_bytes(const Config& config, int64_t capacity) {
    int64_t layers = 0;
    for (int64_t i = 0; i < config.num_layers; ++i) layers += config.has_attention(i) ? 1 : 0;
    return 2 * capacity * qkv_shape(config).kv_width() * layers *
           static_cast<int64_t>(sizeof(Real));
  }
  // Layer `layer`'s block: its keys, then its values.
  Real* block(int64_t layer) const {
    const int64_t offset = offset_[static_cast<size_t>(layer)];
    return offset < 0 ? nullptr : base_ + offset;
  }

  int64_t capacity_, width_;
  int64_t length_ = 0;
  int64_t bytes_ = 0;
  std::vector<int64_t> offset_;  // per layer: its block's first element, -1 without attention
  AlignedBuffer own_;            // the storage, unless the caller's
  Real* base_ = nullptr;         // own_'s or the caller's
  std::vector<int32_t> doc_;
};

using KvCache = KvCacheT<float>;

}  // namespace nanogpt
