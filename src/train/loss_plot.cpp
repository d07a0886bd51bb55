#include "train/loss_plot.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include "runtime/error.hpp"
#include "runtime/svg_plot.hpp"

namespace nanogpt {

namespace {

const char* x_label(PlotX x) {
  switch (x) {
    case PlotX::kStep:
      return "step";
    case PlotX::kSeconds:
      return "training seconds (steps only, validation excluded)";
    case PlotX::kTokens:
      return "training tokens";
  }
  return "";
}

const char* y_label(PlotY y) {
  return y == PlotY::kValLoss ? "validation loss" : "training loss";
}

// [lo, hi] widened to whole steps of a round size, about `target` of them.
struct Range {
  double lo, hi, step;
};
Range round_range(double lo, double hi, int target) {
  if (!(hi > lo)) {  // one value: a unit around it
    lo -= 0.5;
    hi += 0.5;
  }
  const double step = svg::nice_step(lo, hi, target);
  return {std::floor(lo / step + 1e-9) * step, std::ceil(hi / step - 1e-9) * step, step};
}

}  // namespace

const char* plot_x_name(PlotX x) {
  switch (x) {
    case PlotX::kStep:
      return "step";
    case PlotX::kSeconds:
      return "seconds";
    case PlotX::kTokens:
      return "tokens";
  }
  return "";
}

const char* plot_y_name(PlotY y) {
  return y == PlotY::kValLoss ? "val_loss" : "train_loss";
}

std::vector<std::pair<double, double>> loss_curve(const RunMetrics& run, PlotX x, PlotY y) {
  std::vector<std::pair<double, double>> points;
  for (const MetricsRow& r : run.rows) {
    if (y == PlotY::kValLoss && !r.val_loss) continue;
    const double xv = x == PlotX::kStep      ? static_cast<double>(r.step)
                      : x == PlotX::kSeconds ? r.train_seconds
                                             : r.tokens;
    points.emplace_back(xv, y == PlotY::kValLoss ? *r.val_loss : r.train_loss);
  }
  return points;
}

std::string loss_plot_svg(const std::vector<RunMetrics>& runs, const LossPlotOptions& o) {
  if (runs.empty()) throw InputError("nothing to plot: give at least one run");
  if (!o.labels.empty() && o.labels.size() != runs.size()) {
    throw InputError(std::to_string(o.labels.size()) + " labels for " +
                     std::to_string(runs.size()) + " runs; give one label per run, in order");
  }
  std::vector<std::vector<std::pair<double, double>>> curves;
  double x_lo = 0, x_hi = -std::numeric_limits<double>::infinity();
  double y_lo = std::numeric_limits<double>::infinity(), y_hi = -y_lo;
  for (const RunMetrics& run : runs) {
    curves.push_back(loss_curve(run, o.x, o.y));
    if (curves.back().empty()) {
      throw InputError(
          "'" + run.path + "' has no row with " + plot_y_name(o.y) +
          (run.rows.empty() ? " (it has no rows at all)"
           : o.y == PlotY::kValLoss
               ? " (validation runs every val_loss_every steps and at the last step); try --y "
                 "train_loss"
               : ""));
    }
    for (auto [xv, yv] : curves.back()) {
      if (o.log_y && !(yv > 0)) {
        throw InputError("'" + run.path + "': --log-y cannot show the loss " + std::to_string(yv) +
                         " (not positive)");
      }
      x_lo = std::min(x_lo, xv);
      x_hi = std::max(x_hi, xv);
      y_lo = std::min(y_lo, yv);
      y_hi = std::max(y_hi, yv);
    }
  }

  // The chart on the left, the legend in a column on its right.
  constexpr double kLeft = 80, kTop = 50, kWidth = 600, kHeight = 400, kLegendX = 710;
  const double legend_rows = static_cast<double>(runs.size());
  const double height = std::max(kTop + kHeight + 60, kTop + 10 + 20 * legend_rows + 20);
  std::string s = svg::begin_document(1000, height);

  const Range xr = round_range(x_lo, x_hi, 8);
  svg::Panel p{kLeft, kTop, kWidth, kHeight, xr.lo, xr.hi, 0, 1};
  std::vector<double> yticks;
  if (o.log_y) {
    p.log_y = true;
    p.y0 = y_lo * 0.97;
    p.y1 = y_hi / 0.97;
    yticks = svg::log_ticks(p.y0, p.y1);
  } else {
    const Range yr = round_range(y_lo, y_hi, 6);
    p.y0 = yr.lo;
    p.y1 = yr.hi;
    yticks = svg::linear_ticks(yr.lo, yr.hi, yr.step);
  }
  const std::string title =
      !o.title.empty() ? o.title : std::string(y_label(o.y)) + " against " + plot_x_name(o.x);
  svg::axes(s, p, svg::linear_ticks(xr.lo, xr.hi, xr.step), yticks, x_label(o.x), y_label(o.y),
            title);
  for (size_t i = 0; i < curves.size(); ++i) {
    // Ten colours, then the same ten dashed.
    const bool dashed = i >= 10;
    const std::string color = svg::palette_color(i);
    svg::polyline(s, p, curves[i], color, dashed, curves[i].size() <= 60);
    const std::string label = o.labels.empty() ? runs[i].path : o.labels[i];
    svg::legend_entry(s, kLegendX, kTop + 10 + 20 * static_cast<double>(i), color, dashed, label);
  }
  s += svg::end_document();
  return s;
}

}  // namespace nanogpt
