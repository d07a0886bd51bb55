#include "train/evaluate.hpp"

#include <algorithm>

#include "data/token_loader.hpp"
#include "runtime/error.hpp"
#include "runtime/profiler.hpp"

namespace nanogpt {

EvalResult evaluate(Gpt& model, const std::string& pattern, int64_t tokens, int64_t seq_len,
                    int64_t window_blocks, Comm& comm) {
  if (seq_len <= 0 || tokens < seq_len || tokens % seq_len != 0) {
    throw InputError("evaluation tokens (" + std::to_string(tokens) +
                     ") must be a positive multiple of the sequence length (" +
                     std::to_string(seq_len) + ")");
  }
  ProfileScope scope("eval", "evaluate", {tokens, seq_len, window_blocks}, 0, 0);
  LoaderOptions o;
  o.pattern = pattern;
  o.batch_tokens = static_cast<uint64_t>(seq_len);
  o.vocab_size = static_cast<uint32_t>(model.config().vocab_size);
  TokenLoader loader(o);
  std::vector<int32_t> inputs, targets, batch_inputs, batch_targets;
  auto read_sequence = [&] {
    try {
      ProfileScope data("data", "val_loader.next", {seq_len}, 0,
                        10.0 * static_cast<double>(seq_len));
      loader.next(inputs, targets);
    } catch (const InputError& e) {
      throw InputError("validation data '" + pattern + "' holds fewer than " +
                       std::to_string(tokens) + " tokens in sequences of " +
                       std::to_string(seq_len) + " (" + e.what() + "); lower val_tokens");
    }
  };
  // This rank's sequences; those before them are read and dropped, so every rank walks the
  // data as one process does.
  const SliceRange mine = even_slice(tokens / seq_len, comm.size(), comm.rank());
  for (int64_t k = 0; k < mine.begin; ++k) read_sequence();
  double sum = 0;
  const int64_t per_pass = model.config().sequences_per_pass(seq_len);
  for (int64_t s = mine.begin; s < mine.end; s += per_pass) {
    batch_inputs.clear();
    batch_targets.clear();
    for (int64_t b = 0; b < std::min(per_pass, mine.end - s); ++b) {
      read_sequence();
      batch_inputs.insert(batch_inputs.end(), inputs.begin(), inputs.end());
      batch_targets.insert(batch_targets.end(), targets.begin(), targets.end());
    }
    // Its self time is whatever in the model no finer scope covers.
    ProfileScope forward("forward", "micro_batch",
                         {static_cast<int64_t>(batch_inputs.size()), seq_len, window_blocks}, 0, 0);
    sum += model.forward_loss(batch_inputs, batch_targets, window_blocks, nullptr, seq_len);
  }
  sum = comm.sum(sum, "validation loss");
  return {sum / static_cast<double>(tokens), tokens};
}

}  // namespace nanogpt
