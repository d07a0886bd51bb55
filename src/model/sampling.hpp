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

// What a draw works in, kept by the caller between draws (one per thread that draws): the
// vocabulary's weights, and top-k's sort keys and weights. Resized by sample_token; freed with
// it.
struct SamplingScratch {
  std::vector<float> weights;
  std::vector<uint64_t> keys;
  std::vector<double> top_weights;
};

// Draws a token among the first vocab_size entries of `logits` (padding classes beyond the
// vocabulary are never candidates) with probability softmax(logits / temperature), or among
// the top_k most likely. Greedy draws no random number; otherwise exactly one, u, and the token
// is where u·Σw falls in the cumulative sum of the weights w = exp((z − max)/T):
//   - the whole vocabulary: over the ids in increasing order, the weights in fp32 (exp_approx,
//     within 2 ulp) summed in double, no sort; a token whose weight underflows (below e^-87 of
//     the most likely one's) is never drawn;
//   - top-k: over the k most likely tokens, by decreasing logit (equal ones by increasing id), the
//     weights in double (std::exp).
// A draw depends on the logits and u alone: not on the thread, the batch or the machine.
int32_t sample_token(std::span<const float> logits, int64_t vocab_size,
                     const SamplingSettings& settings, Rng& rng, SamplingScratch& scratch);

// The soft-capped logits over the padded vocabulary of row `row` of the model's last forward
// (its final_norm()), as GptDecoder computes them for its last token. `out` is resized.
void forward_row_logits(Gpt& model, int64_t row, std::vector<float>& out);
// The same for rows [row0, row0 + rows) in one call of the head: out is [rows, vocab_padded].
void forward_rows_logits(Gpt& model, int64_t row0, int64_t rows, std::vector<float>& out);

}  // namespace nanogpt
