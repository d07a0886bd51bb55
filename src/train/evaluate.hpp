// Validation loss: the mean loss over the first `tokens` tokens of the shards matching a glob,
// in sequences of `seq_len`, read as the loader reads them (sequence k covers
// tokens[k·seq_len : (k+1)·seq_len + 1]).
#pragma once

#include <cstdint>
#include <string>

#include "model/gpt.hpp"
#include "runtime/comm.hpp"

namespace nanogpt {

struct EvalResult {
  double loss = 0;
  int64_t tokens = 0;
};

// On N ranks (comm), rank r scores its even slice of the sequences and the sums are added: the
// same loss as one process, up to the order of a float64 sum.
EvalResult evaluate(Gpt& model, const std::string& pattern, int64_t tokens, int64_t seq_len,
                    int64_t window_blocks, Comm& comm = Comm::local());

}  // namespace nanogpt
