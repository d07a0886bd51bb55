// Loss curves of training runs as one SVG chart (`nanogpt plot`): one line per run, against
// steps, training seconds or tokens, of the validation or the training loss, with a legend
// naming each run. Drawn with the shared primitives of runtime/svg_plot.hpp.
#pragma once

#include <string>
#include <vector>

#include "train/run_metrics.hpp"

namespace nanogpt {

enum class PlotX { kStep, kSeconds, kTokens };
enum class PlotY { kValLoss, kTrainLoss };

struct LossPlotOptions {
  PlotX x = PlotX::kStep;
  PlotY y = PlotY::kValLoss;
  std::vector<std::string> labels;  // one per run
  std::string title;                // empty: "<y> against <x>"
  bool log_y = false;
};

// The (x, y) points of one run: every row that has the chosen y, in file order.
std::vector<std::pair<double, double>> loss_curve(const RunMetrics& run, PlotX x, PlotY y);

// The chart. InputError if a run has no row with the chosen y (naming the file and what to
// try), if labels and runs differ in number, or if log_y meets a loss that is not positive.
std::string loss_plot_svg(const std::vector<RunMetrics>& runs, const LossPlotOptions& options);

// "step", "seconds", "tokens"; "val_loss", "train_loss": the flags' spellings.
const char* plot_x_name(PlotX x);
const char* plot_y_name(PlotY y);

}  // namespace nanogpt
