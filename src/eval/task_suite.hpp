// A built-in suite for one task family at one level (issue 17, item 4, the task part): cases
// from the registry's generator in one split, each a few-shot prompt with its task instance,
// judged by the family's verifier. `nanogpt evals make-suite` writes them.
#pragma once

#include <cstdint>
#include <string>

#include "eval/suite.hpp"
#include "eval/task_instance.hpp"

namespace nanogpt {

struct TaskSuiteOptions {
  std::string family;
  int level = 1;
  int64_t cases = 100;
  TaskSplit split = TaskSplit::kTest;  // evaluate on test; post-training trains on train
  uint64_t seed = 0;
  int shots = 3;            // solved train examples before each question
  int64_t samples = 1;      // completions per case (pass@k needs more than one)
  double temperature = 0;   // 0: greedy (then samples must be 1)
  int64_t top_k = 0;        // 0: all tokens
  int64_t max_tokens = 64;  // besides the stop string "\n"
  // A level whose split has fewer distinct problems than `cases` gives all it has instead of
  // an error (one-digit additions have about 25 test problems).
  bool allow_fewer = false;
};

// Distinct problems of the split (instances 0, 1, ... of the seed's stream, repeats skipped),
// named "<family>-l<level>-<n>". A level with fewer distinct problems in the split than asked
// is an InputError saying how many there are, unless allow_fewer. The suite has one evaluator,
// "verifier"; each case's expected output is the instance's reference answer (shown in reports; the
// verifier accepts any correct answer).
Suite make_task_suite(const TaskSuiteOptions& options);

}  // namespace nanogpt
