// The attention window schedule: how many blocks the long layers' sliding window spans at a
// training step (short layers see half of it, Config::is_long_window).
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

// The attention window (in blocks) at the end of training: the default for eval and sampling.
int64_t final_window_blocks(const Config& config);

}  // namespace nanogpt
