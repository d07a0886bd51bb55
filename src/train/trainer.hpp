// `nanogpt train`: the training loop of the seed on the CPU — batches from the loader, a
// training step each (train_step.hpp), validation, metrics and run.json (run_directory.hpp),
// checkpoints and exact resume (train_state.hpp), and a clean stop on SIGINT/SIGTERM.
#pragma once

#include <cstdint>
#include <limits>
#include <string>

#include "config/config.hpp"
#include "train/stop_signals.hpp"

namespace nanogpt {

struct TrainOptions {
  Config config;
  std::string train_pattern;
  std::string val_pattern;
  std::string run_dir;
  bool resume = false;
  std::string command_line;  // recorded in run.json
  bool live_line = true;     // only drawn when stderr is a terminal
  int64_t max_steps = 0;  // stop (with a checkpoint) after this many steps of this run; 0: no limit
  // Stop (with a checkpoint) after the first validation at or below this loss (the speedrun
  // track); NaN: train all num_iterations steps.
  double target_val_loss = std::numeric_limits<double>::quiet_NaN();
};

struct TrainResult {
  int64_t steps_run = 0;
  int64_t final_step = 0;
  double final_val_loss = 0;  // NaN if never evaluated
  double final_train_loss = 0;
  double tokens_per_second = 0;
  bool interrupted = false;
  bool reached_target = false;  // stopped at target_val_loss
  double train_seconds = 0;     // this run's training steps, validation and checkpoints excluded
  int64_t trained_tokens = 0;   // by this run's steps
  std::string last_checkpoint;
};

TrainResult train(const TrainOptions& options);

}  // namespace nanogpt
