// The model's weight matrices packed once for the GEMM (kernels/gemm/packed_b.hpp), for the
// forwards that run the same weights again and again: decoding, sampling and evaluation take
// a few rows per call, and packing a weight for each call costs as much as multiplying by it.
// A packed copy is kept until the parameters change (ParameterSet::version(): any non-const
// access to them) and packed again on its next use after that. Training's block products are
// tall, so packing per call is a small share of them, and they leave it alone; but the fused
// loss reads the head's W in many short logits blocks, so training packs the head here once per
// step too.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>

#include "kernels/gemm/packed_b.hpp"
#include "kernels/matmul.hpp"

namespace nanogpt {

class PackedWeights {
 public:
  // W (n_out × n_in, row-major) packed as the B of y = x·Wᵀ (K = n_in, N = n_out) with the
  // kernel of `precision`, as of parameter version `version`; packed now if it was not, or was
  // at another version.
  const PackedB& forward(const float* W, int64_t n_out, int64_t n_in, Precision precision,
                         uint64_t version);
  // Memory held by the packed copies (about the weights' size again in bf16, twice it in fp32).
  size_t bytes() const;

 private:
  struct Entry {
    const float* W = nullptr;
    int64_t n_out = 0, n_in = 0;
    Precision precision = Precision::kFp32;
    uint64_t version = 0;
    PackedB packed;
  };
  std::deque<Entry> entries_;  // one per weight used (a few dozen); deque: references stay valid
};

}  // namespace nanogpt
