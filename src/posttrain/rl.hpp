// `nanogpt rl`: policy-gradient reinforcement learning on verifiable tasks (issue 18, items 6–7).
//
// A step: prompts_per_step train problems of the task mixture (problem i of step s is index
// s·P + i of the mixture's stream: no problem twice until the stream wraps), group_size
// completions of each sampled at `temperature` from the policy (one prefill per prompt, its K/V
// cache copied to each sample, all samples decoded as one batch, finished ones leaving it:
// ModelScorer::generate), each completion checked by its task's verifier (the reward), the
// group's advantages (advantages.hpp: GRPO's normalized, a group-mean or EMA baseline), then
// `updates_per_batch` optimizer steps on the policy loss (policy_gradient.hpp) over the
// batch. Each update runs the model twice over the completions: a forward for the tokens'
// log-probabilities at the sampling temperature (the first update's are the sampling policy's,
// logp_old), then a forward and backward with each token's loss weighted by -dL/dlogp_t
// (TokenLossT), which is the gradient of L. The mask covers each completion's tokens up to and
// including its first <|assistant_end|>.
//
// With kl_coef > 0 a frozen copy of the starting model gives logp_ref (KL by k3).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "posttrain/advantages.hpp"
#include "posttrain/chat_eval.hpp"
#include "posttrain/policy_gradient.hpp"
#include "runtime/comm.hpp"

namespace nanogpt {

struct RlOptions {
  std::string checkpoint;  // the policy to start from (an SFT checkpoint, usually)
  std::string tokenizer;
  nlohmann::json tokenizer_record;
  std::string tasks;  // the mixture whose train problems are the prompts
  // Or a rubric (eval/rubric.hpp): its prompts, in order, rewarded by its weighted criteria;
  // "builtin:fortune-answers" is the built-in one.
  std::string rubric;
  // The checkpoint (or run directory) that answers the rubric's judge criteria
  // (posttrain/checkpoint_judge.hpp), with its tokenizer (empty: the one recorded with it). A
  // rubric with judge criteria needs one; a judge without a rubric is refused.
  std::string judge, judge_tokenizer;
  std::string run_dir;
  bool resume = false;
  int64_t max_steps = 0;  // stop (with a checkpoint) after this many steps of this invocation
  int64_t steps = 50;
  int64_t prompts_per_step = 8;
  int64_t group_size = 8;  // completions per prompt
  int64_t max_tokens = 24;
  double temperature = 1.0;
  int64_t top_k = 0;  // must stay 0: the update's log-probs are the whole tempered distribution's
  AdvantageEstimator estimator = AdvantageEstimator::kGrpo;
  double ema_decay = 0.9;         // kReinforceEma
  PolicyLossConfig loss;          // objective, ε_low/ε_high, β, aggregation
  int64_t updates_per_batch = 1;  // μ
  double lr_scale = 0.05;
  uint64_t seed = 0;
  int64_t window_blocks = 0;
  int64_t checkpoint_every = 0;
  int64_t eval_every = 10;
  ChatEvalOptions eval;
  bool evaluate = true;
  std::string command_line;
  bool live_line = true;
  // The ranks that train together (posttrain/stage_ranks.hpp); null: the job's world, so under
  // mpirun every rank samples, scores and trains on a slice of each step's prompts (whole
  // groups), with the losses normalised over the whole step.
  Comm* comm = nullptr;
};

struct RlStepMetrics {
  int64_t step = 0;
  double mean_reward = 0, pass_rate = 0;  // over the step's completions
  double mean_length = 0;                 // completion tokens
  int64_t uniform_groups = 0;             // groups whose rewards all agree (no gradient)
  double uniform_fraction = 0;
  double clip_fraction = 0, mean_kl = 0, mean_ratio = 1, entropy = 0;
  double loss = 0;
  double sample_s = 0, score_s = 0, train_s = 0;
  double rollout_tokens_per_s = 0;
};

struct RlResult {
  int64_t steps_run = 0;
  bool interrupted = false;
  std::string last_checkpoint;
  std::vector<RlStepMetrics> steps;
  bool evaluated = false;
  ChatEvalResult before, after;
  // With a rubric: each criterion's rate over the rubric's prompts before and after.
  std::string rubric_table;
};

RlResult run_rl(const RlOptions& options);

}  // namespace nanogpt
