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

 private:
  int64_t capacity_, width_;
  int64_t length_ = 0;
  std::vector<AlignedVector<Real>> k_, v_;
  std::vector<int32_t> doc_;
};

using KvCache = KvCacheT<float>;

}  // namespace nanogpt
