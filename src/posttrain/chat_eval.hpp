// Held-out task problems answered in the chat format (issue 18, "Results"): each problem's
// question as a user turn, the model's reply sampled up to <|assistant_end|> (or max_tokens),
// the reply checked by the task's verifier. What SFT, DPO and RL are measured by, before and
// after, on the test split they never train on.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "data/bpe_tokenizer.hpp"
#include "data/chat_format.hpp"
#include "eval/model_scorer.hpp"
#include "eval/task_instance.hpp"
#include "posttrain/task_conversations.hpp"
#include "train/run_directory.hpp"

namespace nanogpt {

struct ChatEvalOptions {
  int64_t problems_per_cell = 50;
  // Samples per problem: 1 with temperature 0 is greedy pass@1; n > 1 samples at `temperature`
  // give pass@1 as the mean and pass@k (k ≤ n) by the unbiased estimator.
  int64_t samples = 1;
  int64_t k = 1;
  double temperature = 0.0;
  int64_t max_tokens = 32;
  uint64_t seed = 0;              // the problems' and the samples' seed
  int64_t max_prompt_tokens = 0;  // the model's context; 0: its train_seq_len
};

struct CellScore {
  TaskCell cell;
  int64_t problems = 0;
  double pass_at_1 = 0;    // mean over problems of (correct samples / samples)
  double pass_at_k = 0;    // mean over problems of pass@k
  double mean_reward = 0;  // the verifier's reward (partial credit where a family gives it)
  double mean_reply_tokens = 0;
  double ended_fraction = 0;  // replies that ended with <|assistant_end|>
};

struct ChatEvalResult {
  std::vector<CellScore> cells;
  double pass_at_1 = 0;  // over all problems
  double pass_at_k = 0;
  double mean_reply_tokens = 0;
  // A few replies, for reading: problem, reply, reward.
  struct Example {
    std::string question, reply;
    double reward = 0;
  };
  std::vector<Example> examples;
};

// InputError naming the option when the options cannot give an evaluation (no problems, k
// outside 1..samples, no reply tokens): what the stages check before they write anything.
void check_chat_eval_options(const ChatEvalOptions& options);

// The test split's problems of every cell (mixture_problems with options.seed), answered and
// verified. Batched: every problem's samples decode together (ModelScorer::generate).
ChatEvalResult evaluate_chat_tasks(ModelScorer& scorer, const BpeTokenizer& tokenizer,
                                   const ChatTokens& chat, const std::vector<TaskCell>& cells,
                                   const ChatEvalOptions& options);

// The line a chat evaluation adds to metrics.jsonl: pass@1 and pass@k overall and per cell.
nlohmann::ordered_json chat_eval_json(const ChatEvalResult& result, int64_t step);

// What the stages do at each evaluation: evaluate_chat_tasks with the options' context set to
// seq_len, its line appended to the run's metrics.jsonl, one line on stderr ("STAGE: step N:
// held-out pass@1 ..."); neither with `run` null (a stage's ranks other than 0).
ChatEvalResult evaluate_and_record(ModelScorer& scorer, const BpeTokenizer& tokenizer,
                                   const ChatTokens& chat, const std::vector<TaskCell>& cells,
                                   ChatEvalOptions options, int64_t seq_len,
                                   const RunDirectory* run, const std::string& stage, int64_t step);

}  // namespace nanogpt
