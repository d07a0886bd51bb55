// Incremental decoding: a K/V cache and the driver that feeds tokens through the model's own
// forward (GptT::forward_cached, the same block code as training), a prompt in one call and
// then one token at a time, so each new token costs O(context), not a full recompute. The mask
// is the training mask (causal, same document, window in 128-token blocks).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "model/gpt.hpp"
#include "model/kv_cache.hpp"

namespace nanogpt {

class GptDecoder {
 public:
  // Room for max_tokens positions. window_blocks: the long-layer window W (short layers use
  // max(1, W/2)). The model's activations are overwritten by each call.
  GptDecoder(Gpt& model, int64_t max_tokens, int64_t window_blocks);

  // Feeds tokens at the next positions; returns the soft-capped logits of the last one over
  // the padded vocabulary (valid until the next call). An InputError past max_tokens.
  const std::vector<float>& feed(std::span<const int32_t> tokens);
  const std::vector<float>& step(int32_t token) { return feed({&token, 1}); }
  int64_t position() const { return cache_.length(); }
  int64_t max_tokens() const { return cache_.capacity(); }
  const KvCache& cache() const { return cache_; }

 private:
  Gpt& model_;
  int64_t window_blocks_;
  KvCache cache_;
  std::vector<float> logits_;
};

}  // namespace nanogpt
