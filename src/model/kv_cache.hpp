// The keys and values of the positions a decoder has run, per attention layer, and each
// position's document: what the model's forward needs to run T new tokens after them
// (GptT::forward_cached) with the same block code as training. Keys are stored after the norm
// and rotation, values after the value-embedding mix, exactly as attention reads them.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "config/config.hpp"
#include "model/qkv_shape.hpp"
#include "runtime/aligned_memory.hpp"
#include "runtime/error.hpp"

namespace nanogpt {

template <class Real>
class KvCacheT {
 public:
  // Room for `capacity` positions; K/V rows of H_kv·D per attention layer.
  KvCacheT(const Config& config, int64_t capacity)
      : capacity_(capacity), width_(qkv_shape(config).kv_width()) {
    if (capacity < 1) {
      throw InputError("a K/V cache needs room for at least one token (asked for " +
                       std::to_string(capacity) + ")");
    }
    k_.resize(static_cast<size_t>(config.num_layers));
    v_.resize(static_cast<size_t>(config.num_layers));
    for (int64_t i = 0; i < config.num_layers; ++i) {
      if (!config.has_attention(i)) continue;
      k_[static_cast<size_t>(i)].assign(static_cast<size_t>(capacity * width_), Real(0));
      v_[static_cast<size_t>(i)].assign(static_cast<size_t>(capacity * width_), Real(0));
    }
    doc_.assign(static_cast<size_t>(capacity), 0);
  }

  int64_t length() const { return length_; }      // positions cached
  int64_t capacity() const { return capacity_; }  // positions it can hold
  int64_t width() const { return width_; }        // elements of one K (or V) row
  // Bytes of keys and values held for the full capacity (what grouped-query attention shrinks).
  int64_t bytes() const {
    int64_t n = 0;
    for (const auto& k : k_) n += 2 * static_cast<int64_t>(k.size() * sizeof(Real));
    return n;
  }

  // Layer `layer`'s keys and values, [capacity, width] rows; the document of each position.
  const Real* k(int64_t layer) const { return k_[static_cast<size_t>(layer)].data(); }
  const Real* v(int64_t layer) const { return v_[static_cast<size_t>(layer)].data(); }
  const int32_t* doc() const { return doc_.data(); }
  int32_t* doc() { return doc_.data(); }

  // Copies T rows of keys and values (row strides ld) to positions [length, length + T).
  void store(int64_t layer, int64_t T, const Real* k, const Real* v, int64_t ld) {
    Real* kc = k_[static_cast<size_t>(layer)].data() + length_ * width_;
    Real* vc = v_[static_cast<size_t>(layer)].data() + length_ * width_;
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
    if (src.width_ != width_ || src.length_ > capacity_ || src.k_.size() != k_.size()) {
      throw InputError("a K/V cache of " + std::to_string(src.length_) + " positions of width " +
                       std::to_string(src.width_) + " does not fit one of " +
                       std::to_string(capacity_) + " positions of width " + std::to_string(width_) +
                       " (caches of another model, or too small)");
    }
    const size_t n = static_cast<size_t>(src.length_ * width_);
    for (size_t i = 0; i < k_.size(); ++i) {
      if (k_[i].empty()) continue;
      std::memcpy(k_[i].data(), src.k_[i].data(), n * sizeof(Real));
      std::memcpy(v_[i].data(), src.v_[i].data(), n * sizeof(Real));
    }
    std::memcpy(doc_.data(), src.doc_.data(), static_cast<size_t>(src.length_) * sizeof(int32_t));
    length_ = src.length_;
  }

 private:
  int64_t capacity_, width_;
  int64_t length_ = 0;
  std::vector<AlignedVector<Real>> k_, v_;
  std::vector<int32_t> doc_;
};

using KvCache = KvCacheT<float>;

}  // namespace nanogpt
