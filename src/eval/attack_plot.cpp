#include "eval/attack_plot.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>

namespace nanogpt {

namespace {

std::string num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", v);
  return buf;
}

std::string label(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v == 0 ? 0.0 : v);  // no "-0" tick
  return buf;
}

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

// A plotting area at (left, top) of w x h pixels over [x0, x1] x [y0, y1], either axis optionally
// logarithmic.
struct Panel {
  double left, top, w, h, x0, x1, y0, y1;
  bool log_x = false, log_y = false;

  double tx(double v) const { return t(v, x0, x1, log_x); }
  double ty(double v) const { return t(v, y0, y1, log_y); }
  double px(double v) const { return left + tx(v) * w; }
  double py(double v) const { return top + (1.0 - ty(v)) * h; }
  static double t(double v, double a, double b, bool log) {
    return log ? (std::log(v) - std::log(a)) / (std::log(b) - std::log(a)) : (v - a) / (b - a);
  }
};

void axes(std::string& s, const Panel& p, const std::vector<double>& xticks,
          const std::vector<double>& yticks, const std::string& xlabel, const std::string& ylabel,
          const std::string& title) {
  s += "<rect x='" + num(p.left) + "' y='" + num(p.top) + "' width='" + num(p.w) + "' height='" +
       num(p.h) + "' fill='none' stroke='#444'/>\n";
  for (double x : xticks) {
    s += "<line x1='" + num(p.px(x)) + "' y1='" + num(p.top) + "' x2='" + num(p.px(x)) + "' y2='" +
         num(p.top + p.h) + "' stroke='#ddd'/>\n";
    s += "<text x='" + num(p.px(x)) + "' y='" + num(p.top + p.h + 16) + "' text-anchor='middle'>" +
         label(x) + "</text>\n";
  }
  for (double y : yticks) {
    s += "<line x1='" + num(p.left) + "' y1='" + num(p.py(y)) + "' x2='" + num(p.left + p.w) +
         "' y2='" + num(p.py(y)) + "' stroke='#ddd'/>\n";
    s += "<text x='" + num(p.left - 6) + "' y='" + num(p.py(y) + 4) + "' text-anchor='end'>" +
         label(y) + "</text>\n";
  }
  s += "<text x='" + num(p.left + p.w / 2) + "' y='" + num(p.top + p.h + 36) +
       "' text-anchor='middle'>" + xlabel + "</text>\n";
  s += "<text transform='translate(" + num(p.left - 48) + "," + num(p.top + p.h / 2) +
       ") rotate(-90)' text-anchor='middle'>" + ylabel + "</text>\n";
  s += "<text x='" + num(p.left + p.w / 2) + "' y='" + num(p.top - 10) +
       "' text-anchor='middle' font-weight='bold'>" + title + "</text>\n";
}

void polyline(std::string& s, const Panel& p, const std::vector<std::pair<double, double>>& pts,
              const std::string& color, bool dashed, bool markers) {
  std::string points;
  for (auto [x, y] : pts) points += num(p.px(x)) + "," + num(p.py(y)) + " ";
  s += "<polyline fill='none' stroke='" + color + "' stroke-width='2'" +
       (dashed ? std::string(" stroke-dasharray='6,4'") : std::string()) + " points='" + points +
       "'/>\n";
  if (!markers) return;
  for (auto [x, y] : pts) {
    s += "<circle cx='" + num(p.px(x)) + "' cy='" + num(p.py(y)) + "' r='2.5' fill='" + color +
         "'/>\n";
  }
}

void legend_entry(std::string& s, double x, double y, const std::string& color, bool dashed,
                  const std::string& text) {
  s += "<line x1='" + num(x) + "' y1='" + num(y) + "' x2='" + num(x + 24) + "' y2='" + num(y) +
       "' stroke='" + color + "' stroke-width='2'" +
       (dashed ? std::string(" stroke-dasharray='6,4'") : std::string()) + "/>\n";
  s += "<text x='" + num(x + 30) + "' y='" + num(y + 4) + "'>" + text + "</text>\n";
}

std::vector<double> linear_ticks(double a, double b, double step) {
  std::vector<double> t;
  for (double v = std::ceil(a / step - 1e-9) * step; v <= b + 1e-9; v += step) {
    t.push_back(std::round(v / step) * step);
  }
  return t;
}

std::vector<double> log_ticks(double a, double b) {
  std::vector<double> t;
  for (double decade = std::pow(10.0, std::floor(std::log10(a))); decade <= b; decade *= 10) {
    for (double m : {1.0, 2.0, 5.0}) {
      if (m * decade >= a * (1 - 1e-9) && m * decade <= b * (1 + 1e-9)) t.push_back(m * decade);
    }
  }
  return t;
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
  std::string s =
      "<svg xmlns='http://www.w3.org/2000/svg' width='1100' height='480' "
      "font-family='sans-serif' font-size='12'>\n<rect width='100%' height='100%' fill='white'/>\n";

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
  s += "</svg>\n";
  return s;
}

}  // namespace nanogpt
