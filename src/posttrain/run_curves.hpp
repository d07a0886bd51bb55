// The curves a post-training run draws of itself (issue 18, "Results": reward, pass@1 and length
// curves as plots written by the runs): panels side by side, each one value of metrics.jsonl
// against the step, written as RUN/curves.svg (atomically) when the run stops.
#pragma once

#include <string>
#include <vector>

namespace nanogpt {

struct CurvePanel {
  std::string title;    // "mean reward"
  std::string pointer;  // a JSON pointer into each metrics line: "/reward", "/eval/pass@1"
};

// The SVG of `panels` from the metrics lines at `metrics_path` (lines without the value are
// skipped; a panel with no points says so instead of a line).
std::string run_curves_svg(const std::string& metrics_path, const std::vector<CurvePanel>& panels,
                           const std::string& title);

// Writes RUN_DIR/curves.svg.
void write_run_curves(const std::string& run_dir, const std::vector<CurvePanel>& panels,
                      const std::string& title);

}  // namespace nanogpt
