#include "model/packed_weights.hpp"

namespace nanogpt {

const PackedB& PackedWeights::forward(const float* W, int64_t n_out, int64_t n_in,
                                      Precision precision, uint64_t version) {
  Entry* entry = nullptr;
  for (Entry& e : entries_) {
    if (e.W == W && e.precision == precision) entry = &e;
  }
  if (entry == nullptr) {
    entries_.emplace_back();
    entry = &entries_.back();
    entry->W = W;
    entry->precision = precision;
  } else if (entry->version == version && entry->n_out == n_out && entry->n_in == n_in) {
    return entry->packed;
  }
  pack_matmul_b(precision, Trans::kYes, n_in, n_out, W, n_in, entry->packed);
  entry->n_out = n_out;
  entry->n_in = n_in;
  entry->version = version;
  return entry->packed;
}

size_t PackedWeights::bytes() const {
  size_t total = 0;
  for (const Entry& e : entries_) total += e.packed.bytes();
  return total;
}

}  // namespace nanogpt
