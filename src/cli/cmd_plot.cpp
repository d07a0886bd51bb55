// `nanogpt plot`: loss curves of one or more runs (their metrics.jsonl) overlaid in one SVG.
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "cli/commands.hpp"
#include "runtime/file_io.hpp"
#include "train/loss_plot.hpp"
#include "train/run_metrics.hpp"

namespace nanogpt::cli {

namespace {

std::vector<std::string> split_commas(const std::string& s) {
  std::vector<std::string> out;
  size_t pos = 0;
  while (true) {
    const size_t comma = s.find(',', pos);
    out.push_back(s.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos));
    if (comma == std::string::npos) return out;
    pos = comma + 1;
  }
}

// A run's default legend text: its directory's name (what `train --out` was given).
std::string default_label(const std::string& metrics_path) {
  const std::filesystem::path p(metrics_path);
  const std::string dir = p.parent_path().filename().string();
  return dir.empty() || dir == "." ? metrics_path : dir;
}

}  // namespace

void register_plot(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "plot", "Loss curves of training runs (metrics.jsonl files or run directories) as an SVG");
  struct Args {
    std::vector<std::string> runs;
    std::string out, x = "step", y = "val_loss", labels, title;
    bool log_y = false;
  };
  auto a = std::make_shared<Args>();
  cmd->add_option("runs", a->runs, "Run directories or metrics.jsonl files, one line each")
      ->required();
  cmd->add_option("--out", a->out, "The SVG file to write")->required();
  cmd->add_option("--x", a->x,
                  "Horizontal axis: step, seconds (training time, validation excluded) or tokens")
      ->check(CLI::IsMember({"step", "seconds", "tokens"}))
      ->capture_default_str();
  cmd->add_option("--y", a->y,
                  "Vertical axis: val_loss (the rows that evaluated it) or train_loss (every step)")
      ->check(CLI::IsMember({"val_loss", "train_loss"}))
      ->capture_default_str();
  cmd->add_option("--labels", a->labels,
                  "Legend texts, comma-separated, one per run in order (default: each run's "
                  "directory name)");
  cmd->add_option("--title", a->title, "Chart title (default: what is plotted against what)");
  cmd->add_flag("--log-y", a->log_y, "Logarithmic loss axis");
  cmd->callback([a] {
    LossPlotOptions o;
    o.x = a->x == "seconds" ? PlotX::kSeconds : a->x == "tokens" ? PlotX::kTokens : PlotX::kStep;
    o.y = a->y == "train_loss" ? PlotY::kTrainLoss : PlotY::kValLoss;
    o.title = a->title;
    o.log_y = a->log_y;
    std::vector<RunMetrics> runs;
    for (const std::string& r : a->runs) {
      runs.push_back(read_run_metrics(r));
      if (runs.back().torn_last_line) {
        std::fprintf(stderr, "nanogpt: note: '%s' ends in an unfinished line (skipped)\n",
                     runs.back().path.c_str());
      }
    }
    if (!a->labels.empty()) {
      o.labels = split_commas(a->labels);
    } else {
      for (const RunMetrics& r : runs) o.labels.push_back(default_label(r.path));
    }
    write_file_atomic(a->out, loss_plot_svg(runs, o));
    size_t points = 0;
    for (const RunMetrics& r : runs) points += loss_curve(r, o.x, o.y).size();
    std::fprintf(stderr, "wrote %s: %zu runs, %zu points\n", a->out.c_str(), runs.size(), points);
  });
}

}  // namespace nanogpt::cli
