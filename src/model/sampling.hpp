// Picking the next token from a decoder's logits (temperature, top-k), shared by `nanogpt
// sample` and the evaluation runner so both draw the same tokens from the same seed.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "model/gpt.hpp"
#include "runtime/random.hpp"

namespace nanogpt {

struct SamplingSettings {
  double temperature = 1.0;  // 0: greedy (the most likely token, the lowest id of equal ones)
  int64_t top_k = 0;         // sample among the k most likely tokens; 0: all
};

// Draws a token among the first vocab_size entries of `logits` (padding classes beyond the
// vocabulary are never candidates). Greedy draws no random number; otherwise exactly one.
// `order` and `probs` are scratch the caller keeps between calls (resized here).
int32_t sample_token(std::span<const float> logits, int64_t vocab_size,
                     const SamplingSettings& settings, Rng& rng, std::vector<int32_t>& order,
                     std::vector<double>& probs);

// The soft-capped logits over the padded vocabulary of row `row` of the model's last forward
// (its final_norm()), as GptDecoder computes them for its last token. `out` is resized.
void forward_row_logits(Gpt& model, int64_t row, std::vector<float>& out);
// The same for rows [row0, row0 + rows) in one call of the head: out is [rows, vocab_padded].
void forward_rows_logits(Gpt& model, int64_t row0, int64_t rows, std::vector<float>& out);

}  // namespace nanogpt
