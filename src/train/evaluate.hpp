// Validation loss: the mean loss over the first `tokens` tokens of the shards matching a glob,
// in sequences of `seq_len`, read as the loader reads them (sequence k covers
// tokens[k·seq_len : (k+1)·seq_len + 1]).
#pragma once

#include <cstdint>
#include <string>

#include "model/gpt.hpp"

namespace nanogpt {

struct EvalResult {
  double loss = 0;
  int64_t tokens = 0;
};

EvalResult evaluate(Gpt& model, const std::string& pattern, int64_t tokens, int64_t seq_len,
                    int64_t window_blocks);

}  // namespace nanogpt
