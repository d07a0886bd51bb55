// The boosting attack as a hand-written SVG: left, the majority vote's loss on the holdout
// (solid) and on fresh labels (dashed) against the number of submissions k, per mechanism;
// right, on log-log axes, each mechanism's measured leaderboard error at a fixed k against the
// holdout size n, under the Ladder's bound (ln(kn)/n)^(1/3).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "eval/boosting_attack.hpp"

namespace nanogpt {

struct AttackErrorAtRows {
  int64_t rows = 0;
  std::vector<BoostingAttackPoint> points;  // one per mechanism, all at the same k
};

std::string boosting_attack_svg(const std::vector<BoostingAttackPoint>& by_k, int64_t rows,
                                const std::vector<AttackErrorAtRows>& by_rows, int64_t bound_k);

}  // namespace nanogpt
