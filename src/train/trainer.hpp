// `nanogpt train`: the training loop of the seed on the CPU — batches from the loader,
// forward/backward with gradient accumulation, Muon + Adam, validation, metrics, checkpoints
// and exact resume.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "config/config.hpp"
#include "model/gpt.hpp"
#include "optim/gpt_optimizer.hpp"

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
};

struct TrainResult {
  int64_t steps_run = 0;
  int64_t final_step = 0;
  double final_val_loss = 0;  // NaN if never evaluated
  double final_train_loss = 0;
  double tokens_per_second = 0;
  bool interrupted = false;
  std::string last_checkpoint;
};

TrainResult train(const TrainOptions& options);

// One optimisation step, shared by `train` and `bench train`: the global batch (inputs and
// targets of tokens_per_step tokens) is cut into sequences of train_seq_len, each runs forward
// and backward with gradients accumulated for the mean loss, then the optimizer takes step
// `step` (0-based) of config.num_iterations. Returns the mean loss; throws Error naming the
// first non-finite tensor if it is not finite (the optimizer has not run then).
double run_train_step(Gpt& model, GptOptimizer& optimizer, std::span<const int32_t> inputs,
                      std::span<const int32_t> targets, int64_t step, int64_t window_blocks);

// Set by SIGINT/SIGTERM; the loop finishes its step, checkpoints and returns.
void request_stop();
bool stop_requested();

}  // namespace nanogpt
