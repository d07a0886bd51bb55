// Line charts as hand-written SVG, the one copy every plot uses (the boosting attack's,
// eval/attack_plot.*; training curves, train/loss_plot.*): a document, panels with linear or
// logarithmic axes, grid lines and tick labels, polylines (solid or dashed, with optional
// markers), legend entries, and the escaping of text. Coordinates are written with one
// decimal: a tenth of a pixel, and the same bytes for the same plot on every machine.
#pragma once

#include <cstddef>
#include <string>
#include <utility>
#include <vector>

namespace nanogpt::svg {

// Text for element content or a quoted attribute: & < > " ' as entities.
std::string escape(const std::string& text);
// A coordinate: "%.1f".
std::string number(double v);
// A tick label: "%g", never "-0".
std::string tick_label(double v);

// The document's opening tag (white background) and closing tag.
std::string begin_document(double width, double height);
std::string end_document();

// A plotting area at (left, top) of w × h pixels showing [x0, x1] × [y0, y1], either axis
// optionally logarithmic (then its range must be positive).
struct Panel {
  double left = 0, top = 0, w = 0, h = 0, x0 = 0, x1 = 1, y0 = 0, y1 = 1;
  bool log_x = false, log_y = false;

  double px(double v) const { return left + fraction(v, x0, x1, log_x) * w; }
  double py(double v) const { return top + (1.0 - fraction(v, y0, y1, log_y)) * h; }
  static double fraction(double v, double a, double b, bool log);
};

// The panel's frame, a grid line and label per tick, the axis labels and the title (texts are
// escaped here).
void axes(std::string& s, const Panel& p, const std::vector<double>& xticks,
          const std::vector<double>& yticks, const std::string& xlabel, const std::string& ylabel,
          const std::string& title);
// One line through `points` (data coordinates), with a small circle on each when `markers`.
void polyline(std::string& s, const Panel& p, const std::vector<std::pair<double, double>>& points,
              const std::string& color, bool dashed, bool markers);
// A legend line of 24 pixels at (x, y) and its text (escaped) to the right.
void legend_entry(std::string& s, double x, double y, const std::string& color, bool dashed,
                  const std::string& text);

// Multiples of `step` in [a, b].
std::vector<double> linear_ticks(double a, double b, double step);
// A round step (1, 2 or 5 times a power of ten) giving about `target` ticks over [a, b].
double nice_step(double a, double b, int target);
// 1, 2 and 5 times the powers of ten in [a, b] (a > 0); on a range narrower than that offers
// three of, every integer multiple of the powers of ten (4, 5, 6, ...).
std::vector<double> log_ticks(double a, double b);

// The i-th of ten distinguishable colours (matplotlib's tab10), cycling.
const char* palette_color(size_t i);

}  // namespace nanogpt::svg
