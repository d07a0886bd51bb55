#include "optim/schedule.hpp"

#include <algorithm>
#include <cmath>
#include <string>

#include "runtime/error.hpp"

namespace nanogpt {

namespace {

void check_step(const char* what, int64_t step, int64_t total) {
  if (total <= 0 || step < 0 || step > total) {
    throw Error(std::string(what) + ": step " + std::to_string(step) + " is outside [0, " +
                std::to_string(total) + "] (total must be positive)");
  }
}

}  // namespace

double lr_multiplier(int64_t step, int64_t total, double cooldown_frac) {
  check_step("lr_multiplier", step, total);
  if (!(cooldown_frac >= 0.0 && cooldown_frac <= 1.0)) {
    throw Error("lr_multiplier: cooldown_frac " + std::to_string(cooldown_frac) +
                " is outside [0, 1]");
  }
  const double x = static_cast<double>(step) / static_cast<double>(total);
  // Without a cooldown the seed's formula would divide 0 by 0 at the final step.
  if (x < 1.0 - cooldown_frac || cooldown_frac == 0.0) return 1.0;
  const double w = (1.0 - x) / cooldown_frac;
  return w * 1.0 + (1.0 - w) * 0.1;
}

double muon_momentum(int64_t step, const MuonConfig& config) {
  if (step < 0) throw Error("muon_momentum: negative step " + std::to_string(step));
  const double frac =
      config.momentum_warmup_steps <= 0
          ? 1.0
          : std::min(static_cast<double>(step) / static_cast<double>(config.momentum_warmup_steps),
                     1.0);
  return (1.0 - frac) * config.momentum_start + frac * config.momentum_end;
}

int64_t window_blocks(int64_t step, int64_t total, int64_t max_window_tokens, int64_t block) {
  check_step("window_blocks", step, total);
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

}  // namespace nanogpt
