// Incremental decoding with a key/value cache: each new token runs the model on one position
// and attends over the cached keys and values, so it costs O(context), not a full recompute.
// The mask is the training mask (causal, same document, window in 128-token blocks).
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/rotary.hpp"
#include "model/gpt.hpp"

namespace nanogpt {

class GptDecoder {
 public:
  // window_blocks: the long-layer window W (short layers use max(1, W/2)).
  GptDecoder(const Gpt& model, int64_t max_tokens, int64_t window_blocks);

  // Feeds the token at the next position; returns its soft-capped logits over the padded
  // vocabulary (valid until the next call).
  const std::vector<float>& step(int32_t token);
  int64_t position() const { return pos_; }
  int64_t max_tokens() const { return max_tokens_; }

 private:
  const Gpt& model_;
  const Config& c_;
  int64_t max_tokens_, window_blocks_;
  int64_t pos_ = 0;
  int32_t doc_ = 0;
  RotaryTable rotary_;
  std::vector<int32_t> docs_;                // per cached position
  std::vector<std::vector<float>> k_cache_;  // per layer: [max_tokens, H·D]
  std::vector<std::vector<float>> v_cache_;
  std::vector<std::vector<float>> skip_;  // outputs of the first L/2 blocks
  std::vector<float> x0_, x_, norm_, qkv_, rstd_qk_, att_, hidden_, scores_, logits_;
};

}  // namespace nanogpt
