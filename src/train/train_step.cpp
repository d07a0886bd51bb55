#include "train/train_step.hpp"

#include "optim/gpt_optimizer.hpp"

namespace nanogpt {

FlopCount train_step_flops(const Config& c, int64_t window_blocks) {
  FlopCount f = sequence_flops(c, c.train_seq_len, window_blocks, /*backward=*/true)
                    .scaled(static_cast<double>(c.tokens_per_step / c.train_seq_len));
  f.newton_schulz = muon_newton_schulz_flops(c);
  return f;
}

}  // namespace nanogpt
