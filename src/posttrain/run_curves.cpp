#include "posttrain/run_curves.hpp"

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <sstream>

#include "runtime/file_io.hpp"
#include "runtime/svg_plot.hpp"

namespace nanogpt {

std::string run_curves_svg(const std::string& metrics_path, const std::vector<CurvePanel>& panels,
                           const std::string& title) {
  std::vector<std::vector<std::pair<double, double>>> series(panels.size());
  std::istringstream in(read_file(metrics_path));
  std::string line;
  while (std::getline(in, line)) {
    const auto j = nlohmann::json::parse(line, nullptr, false);
    if (!j.is_object() || !j.contains("step")) continue;  // a torn last line
    const double step = j["step"].get<double>();
    for (size_t p = 0; p < panels.size(); ++p) {
      const nlohmann::json::json_pointer ptr(panels[p].pointer);
      if (j.contains(ptr) && j[ptr].is_number()) {
        series[p].emplace_back(step, j[ptr].get<double>());
      }
    }
  }
  constexpr double kPanelW = 300, kPanelH = 220, kMarginL = 60, kMarginT = 50, kGap = 70;
  const double width = kMarginL + static_cast<double>(panels.size()) * (kPanelW + kGap);
  std::string s = svg::begin_document(width, kMarginT + kPanelH + 60);
  s += "<text x=\"" + svg::number(kMarginL) +
       "\" y=\"20\" font-family=\"sans-serif\" "
       "font-size=\"14\">" +
       svg::escape(title) + "</text>\n";
  for (size_t p = 0; p < panels.size(); ++p) {
    const auto& pts = series[p];
    svg::Panel panel;
    panel.left = kMarginL + static_cast<double>(p) * (kPanelW + kGap);
    panel.top = kMarginT;
    panel.w = kPanelW;
    panel.h = kPanelH;
    double x1 = 1, y0 = 0, y1 = 1;
    for (const auto& [x, y] : pts) {
      x1 = std::max(x1, x);
      y0 = std::min(y0, y);
      y1 = std::max(y1, y);
    }
    panel.x0 = 0;
    panel.x1 = x1;
    panel.y0 = y0;
    panel.y1 = y1 > y0 ? y1 : y0 + 1;
    const double xs = svg::nice_step(0, x1, 5), ys = svg::nice_step(panel.y0, panel.y1, 5);
    svg::axes(s, panel, svg::linear_ticks(0, x1, xs), svg::linear_ticks(panel.y0, panel.y1, ys),
              "step", "", panels[p].title + (pts.empty() ? " (no points)" : ""));
    if (!pts.empty()) svg::polyline(s, panel, pts, svg::palette_color(p), false, pts.size() < 40);
  }
  s += svg::end_document();
  return s;
}

void write_run_curves(const std::string& run_dir, const std::vector<CurvePanel>& panels,
                      const std::string& title) {
  write_file_atomic(run_dir + "/curves.svg",
                    run_curves_svg(run_dir + "/metrics.jsonl", panels, title));
}

}  // namespace nanogpt
