#include "runtime/svg_plot.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <initializer_list>

namespace nanogpt::svg {

std::string escape(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&apos;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

std::string number(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", v);
  return buf;
}

std::string tick_label(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v == 0 ? 0.0 : v);  // no "-0" tick
  return buf;
}

std::string begin_document(double width, double height) {
  return "<svg xmlns='http://www.w3.org/2000/svg' width='" + tick_label(width) + "' height='" +
         tick_label(height) +
         "' font-family='sans-serif' font-size='12'>\n<rect width='100%' height='100%' "
         "fill='white'/>\n";
}

std::string end_document() {
  return "</svg>\n";
}

double Panel::fraction(double v, double a, double b, bool log) {
  return log ? (std::log(v) - std::log(a)) / (std::log(b) - std::log(a)) : (v - a) / (b - a);
}

void axes(std::string& s, const Panel& p, const std::vector<double>& xticks,
          const std::vector<double>& yticks, const std::string& xlabel, const std::string& ylabel,
          const std::string& title) {
  s += "<rect x='" + number(p.left) + "' y='" + number(p.top) + "' width='" + number(p.w) +
       "' height='" + number(p.h) + "' fill='none' stroke='#444'/>\n";
  for (double x : xticks) {
    s += "<line x1='" + number(p.px(x)) + "' y1='" + number(p.top) + "' x2='" + number(p.px(x)) +
         "' y2='" + number(p.top + p.h) + "' stroke='#ddd'/>\n";
    s += "<text x='" + number(p.px(x)) + "' y='" + number(p.top + p.h + 16) +
         "' text-anchor='middle'>" + tick_label(x) + "</text>\n";
  }
  for (double y : yticks) {
    s += "<line x1='" + number(p.left) + "' y1='" + number(p.py(y)) + "' x2='" +
         number(p.left + p.w) + "' y2='" + number(p.py(y)) + "' stroke='#ddd'/>\n";
    s += "<text x='" + number(p.left - 6) + "' y='" + number(p.py(y) + 4) + "' text-anchor='end'>" +
         tick_label(y) + "</text>\n";
  }
  s += "<text x='" + number(p.left + p.w / 2) + "' y='" + number(p.top + p.h + 36) +
       "' text-anchor='middle'>" + escape(xlabel) + "</text>\n";
  s += "<text transform='translate(" + number(p.left - 48) + "," + number(p.top + p.h / 2) +
       ") rotate(-90)' text-anchor='middle'>" + escape(ylabel) + "</text>\n";
  s += "<text x='" + number(p.left + p.w / 2) + "' y='" + number(p.top - 10) +
       "' text-anchor='middle' font-weight='bold'>" + escape(title) + "</text>\n";
}

void polyline(std::string& s, const Panel& p, const std::vector<std::pair<double, double>>& points,
              const std::string& color, bool dashed, bool markers) {
  std::string coords;
  for (auto [x, y] : points) coords += number(p.px(x)) + "," + number(p.py(y)) + " ";
  s += "<polyline fill='none' stroke='" + escape(color) + "' stroke-width='2'" +
       (dashed ? std::string(" stroke-dasharray='6,4'") : std::string()) + " points='" + coords +
       "'/>\n";
  if (!markers) return;
  for (auto [x, y] : points) {
    s += "<circle cx='" + number(p.px(x)) + "' cy='" + number(p.py(y)) + "' r='2.5' fill='" +
         escape(color) + "'/>\n";
  }
}

void legend_entry(std::string& s, double x, double y, const std::string& color, bool dashed,
                  const std::string& text) {
  s += "<line x1='" + number(x) + "' y1='" + number(y) + "' x2='" + number(x + 24) + "' y2='" +
       number(y) + "' stroke='" + escape(color) + "' stroke-width='2'" +
       (dashed ? std::string(" stroke-dasharray='6,4'") : std::string()) + "/>\n";
  s += "<text x='" + number(x + 30) + "' y='" + number(y + 4) + "'>" + escape(text) + "</text>\n";
}

std::vector<double> linear_ticks(double a, double b, double step) {
  std::vector<double> t;
  for (double v = std::ceil(a / step - 1e-9) * step; v <= b + 1e-9; v += step) {
    t.push_back(std::round(v / step) * step);
  }
  return t;
}

double nice_step(double a, double b, int target) {
  const double raw = (b - a) / std::max(target, 1);
  if (!(raw > 0) || !std::isfinite(raw)) return 1;
  const double decade = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0}) {
    if (m * decade >= raw * (1 - 1e-9)) return m * decade;
  }
  return 10 * decade;
}

std::vector<double> log_ticks(double a, double b) {
  auto ticks = [&](std::initializer_list<double> mantissas) {
    std::vector<double> t;
    for (double decade = std::pow(10.0, std::floor(std::log10(a))); decade <= b; decade *= 10) {
      for (double m : mantissas) {
        if (m * decade >= a * (1 - 1e-9) && m * decade <= b * (1 + 1e-9)) t.push_back(m * decade);
      }
    }
    return t;
  };
  std::vector<double> t = ticks({1.0, 2.0, 5.0});
  if (t.size() < 3) t = ticks({1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0});
  return t;
}

const char* palette_color(size_t i) {
  static const char* const kColors[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
                                        "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"};
  return kColors[i % (sizeof kColors / sizeof kColors[0])];
}

}  // namespace nanogpt::svg
