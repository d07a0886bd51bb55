// A suite run on a checkpoint, as `evals run` does it and `leaderboard submit --checkpoint`
// reuses it: the checkpoint's configuration and weights (one model copy per worker), its
// tokenizer checked against the model and the suite, and the attention window training ended
// with unless one is given.
#pragma once

#include <cstdint>
#include <string>

#include "eval/eval_report.hpp"
#include "eval/suite.hpp"
#include "eval/suite_runner.hpp"

namespace nanogpt::cli {

struct CheckpointRun {
  std::string checkpoint;  // a checkpoint directory, or a run directory (its newest checkpoint)
  std::string tokenizer;   // empty: the one recorded with the checkpoint's training data
  std::string precision;   // empty: what the checkpoint's configuration resolves to here
  int64_t window = 0;      // 0: the window training ended with
  int threads = 1;         // workers, each with its own model copy
};

// Runs `suite` on the checkpoint; `options.window_blocks` is set from `run`. The report's
// checkpoint and tokenizer fields are filled in. workers_used, if given, receives the number
// of workers (at most one per case).
EvalReport run_suite_on_checkpoint(const Suite& suite, const CheckpointRun& run,
                                   SuiteRunOptions options, int* workers_used = nullptr);

}  // namespace nanogpt::cli
