#include "eval/attack_plot.hpp"

#include <algorithm>
#include <cmath>

#include "runtime/svg_plot.hpp"

namespace nanogpt {

namespace {

using svg::axes;
using svg::legend_entry;
using svg::linear_ticks;
using svg::log_ticks;
using svg::Panel;
using svg::polyline;

const char* color_of(MechanismKind kind) {
  switch (kind) {
    case MechanismKind::kKaggle:
      return "#d62728";
    case MechanismKind::kLadder:
      return "#1f77b4";
    case MechanismKind::kLadderFree:
      return "#2ca02c";
    case MechanismKind::kSubsample:
      return "#9467bd";
  }
  return "#000";
}

}  // namespace

std::string boosting_attack_svg(const std::vector<BoostingAttackPoint>& by_k, int64_t rows,
                                const std::vector<AttackErrorAtRows>& by_rows, int64_t bound_k) {
  std::vector<MechanismKind> kinds;
  for (const auto& p : by_k) {
    if (std::find(kinds.begin(), kinds.end(), p.mechanism) == kinds.end()) {
      kinds.push_back(p.mechanism);
    }
  }
  std::string s = svg::begin_document(1100, 480);

  // Left: loss against k.
  double k_max = 1, lo = 0.5;
  for (const auto& p : by_k) {
    k_max = std::max(k_max, static_cast<double>(p.k));
    lo = std::min({lo, p.holdout_loss, p.fresh_loss});
  }
  const double y0 = std::floor((lo - 0.005) * 100) / 100;
  const Panel left{80, 40, 420, 330, 0, k_max, y0, 0.52};
  axes(s, left, linear_ticks(0, k_max, k_max > 200 ? 100 : 20), linear_ticks(y0, 0.52, 0.01),
       "submissions k", "0-1 loss of the majority vote",
       "Boosting attack, n = " + std::to_string(rows));
  for (MechanismKind kind : kinds) {
    std::vector<std::pair<double, double>> holdout, fresh;
    for (const auto& p : by_k) {
      if (p.mechanism != kind) continue;
      holdout.emplace_back(static_cast<double>(p.k), p.holdout_loss);
      fresh.emplace_back(static_cast<double>(p.k), p.fresh_loss);
    }
    polyline(s, left, holdout, color_of(kind), false, true);
    polyline(s, left, fresh, color_of(kind), true, false);
  }
  double ly = 428;  // below the axis labels
  for (size_t i = 0; i < kinds.size(); ++i) {
    legend_entry(s, 80 + 110 * static_cast<double>(i), ly, color_of(kinds[i]), false,
                 std::string(mechanism_name(kinds[i])));
  }
  legend_entry(s, 80, ly + 22, "#444", false, "holdout (public) loss");
  legend_entry(s, 280, ly + 22, "#444", true, "fresh-data loss");

  // Right: leaderboard error against n, with the bound.
  if (!by_rows.empty()) {
    const double n0 = static_cast<double>(by_rows.front().rows) / 2;
    const double n1 = static_cast<double>(by_rows.back().rows) * 2;
    double e_lo = ladder_error_bound(static_cast<double>(bound_k), n1), e_hi = 0;
    for (const auto& r : by_rows) {
      for (const auto& p : r.points) {
        if (p.leaderboard_error > 0) e_lo = std::min(e_lo, p.leaderboard_error);
        e_hi = std::max(e_hi, p.leaderboard_error);
      }
    }
    e_hi = std::max(e_hi, ladder_error_bound(static_cast<double>(bound_k), n0));
    const double ey0 = std::pow(10.0, std::floor(std::log10(e_lo * 0.9)));  // whole decades
    const double ey1 = std::pow(10.0, std::ceil(std::log10(e_hi * 1.1)));
    Panel right{620, 40, 420, 330, n0, n1, ey0, ey1};
    right.log_x = right.log_y = true;
    axes(s, right, log_ticks(n0, n1), log_ticks(ey0, ey1), "holdout rows n",
         "leaderboard error max_t |R_t - 1/2|",
         "Leaderboard error at k = " + std::to_string(bound_k));
    std::vector<std::pair<double, double>> bound;
    for (int i = 0; i <= 60; ++i) {
      const double n = n0 * std::pow(n1 / n0, i / 60.0);
      bound.emplace_back(n, ladder_error_bound(static_cast<double>(bound_k), n));
    }
    polyline(s, right, bound, "#000", true, false);
    for (MechanismKind kind : kinds) {
      std::vector<std::pair<double, double>> pts;
      for (const auto& r : by_rows) {
        for (const auto& p : r.points) {
          if (p.mechanism == kind && p.leaderboard_error > 0) {
            pts.emplace_back(static_cast<double>(r.rows), p.leaderboard_error);
          }
        }
      }
      polyline(s, right, pts, color_of(kind), false, true);
    }
    legend_entry(s, 620, ly, "#000", true, "Ladder bound (ln(kn)/n)^(1/3), constant 1");
  }
  s += svg::end_document();
  return s;
}

}  // namespace nanogpt
