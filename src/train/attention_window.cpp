#include "train/attention_window.hpp"

#include <algorithm>
#include <cmath>
#include <string>

#include "runtime/error.hpp"

namespace nanogpt {

int64_t window_blocks(int64_t step, int64_t total, int64_t max_window_tokens, int64_t block) {
  if (total <= 0 || step < 0 || step > total) {
    throw Error("window_blocks: step " + std::to_string(step) + " is outside [0, " +
                std::to_string(total) + "] (total must be positive)");
  }
  if (max_window_tokens < 0 || block <= 0) {
    throw Error("window_blocks: max_window_tokens " + std::to_string(max_window_tokens) +
                " must be >= 0 and block " + std::to_string(block) + " positive");
  }
  const double x = static_cast<double>(step) / static_cast<double>(total);
  const double tokens = static_cast<double>(max_window_tokens) * x;
  // The seed's next_multiple_of_n: the smallest multiple of `block`, at least `block`, that is
  // >= tokens. The comparison is against the double itself, so 1728·x landing a hair above a
  // multiple (x is rounded) moves to the next block exactly as in Python.
  int64_t blocks = std::max<int64_t>(1, static_cast<int64_t>(std::ceil(tokens / block)));
  while (static_cast<double>(blocks * block) < tokens) ++blocks;
  while (blocks > 1 && static_cast<double>((blocks - 1) * block) >= tokens) --blocks;
  return blocks;
}

int64_t max_window_blocks(const Config& c) {
  return c.train_seq_len / c.block_size;
}

int64_t attention_window_at(const Config& c, int64_t step) {
  // Without the warm-up every step takes the schedule's end point.
  const int64_t at = c.window_warmup ? step : c.num_iterations;
  return std::min(max_window_blocks(c),
                  window_blocks(at, c.num_iterations, c.max_window_tokens, c.block_size));
}

}  // namespace nanogpt
