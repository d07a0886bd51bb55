// Reading a run's metrics.jsonl back (the trainer writes it, run_directory.hpp): one row per
// step with the step, the training loss, the step's time and throughput, and the validation
// loss on the steps that evaluated it (every val_loss_every steps and the last). What a plot
// or a comparison of runs needs: per row the step, the training seconds and the tokens so far
// (sums of the rows' step_s and tokens: validation and checkpoints excluded, as the seed times
// a run), and the two losses.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace nanogpt {

struct MetricsRow {
  int64_t step = 0;
  double train_seconds = 0;  // Σ step_s up to and including this step
  double tokens = 0;         // Σ tokens_per_s·step_s (each step's tokens) up to this step
  double train_loss = 0;     // "loss"
  std::optional<double> val_loss;
};

struct RunMetrics {
  std::string path;  // the metrics.jsonl read
  std::vector<MetricsRow> rows;
  // A last line without its newline that does not parse: a run still writing, or one that
  // crashed mid-line (a resume drops it). Skipped, not an error.
  bool torn_last_line = false;
};

// The metrics.jsonl at `path`, or in the run directory `path`. InputError naming the file (and
// file:line for a line that is not a JSON object or lacks a field) if it cannot be read.
RunMetrics read_run_metrics(const std::string& path);

}  // namespace nanogpt
