// The attention window rule, written once: how many blocks of block_size tokens the long
// layers' sliding window spans at a training step (short layers see half of it, at least one
// block; Config::is_long_window). Training, evaluation, sampling and `bench train` all take
// their window from here.
#pragma once

#include <cstdint>

#include "config/config.hpp"

namespace nanogpt {

// The seed's get_window_size_blocks: the sliding attention window, in blocks of `block`
// tokens, grows linearly from 1 block at step 0 to max_window_tokens (rounded up to a whole
// block) at step == total. Short windows early are cheaper and the model first needs only
// local context anyway. Requires 0 <= step <= total, total > 0, max_window_tokens >= 0,
// block > 0.
int64_t window_blocks(int64_t step, int64_t total, int64_t max_window_tokens = 1728,
                      int64_t block = 128);

// The widest window training uses: a whole training sequence, train_seq_len / block_size.
int64_t max_window_blocks(const Config& config);

// The long layers' window at training step `step` (0 ≤ step ≤ num_iterations): the seed's
// schedule up to max_window_tokens, clamped to max_window_blocks (max_window_tokens may exceed
// a training sequence). The clamp is to the training sequence, not to whatever sequence is
// being run: short layers see half of the window, so clamping to a shorter evaluation or
// sampling context would narrow them below what the model was trained with. Evaluation and
// sampling default to step num_iterations, the window the model last trained with. With
// window_warmup false, every step has that last window (max_window_tokens from step 0).
int64_t attention_window_at(const Config& config, int64_t step);

}  // namespace nanogpt
