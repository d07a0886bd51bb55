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

}  // namespace nanogpt
