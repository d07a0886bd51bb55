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
//
// PPO (--estimator ppo_gae): a value head (value_head.hpp) on the policy's final-norm rows gives
// each completion token a value V_t, read in the same forward as the log-probabilities; the first
// update's are V_old. The rewards are per token: the completion's reward on its last token, 0 on
// the others (the KL stays in the loss, as above). GAE(γ, λ) over each completion's tokens gives
// the advantages, which go into the policy loss token by token, and the returns R_t = A_t + V_old,
// which the value loss (value_loss.hpp, aggregated like the policy loss) regresses V onto. Each
// update's backward carries both losses' gradients: the policy's, and value_coef times the value
// loss's through the head into the trunk (TokenLossT::final_norm_grad); the head itself takes the
// value loss's whole gradient and its own Adam step (value_lr, constant) after the policy's step.
// Defaults, and why:
//   γ = 1        a completion is a short episode whose only reward is at its end: discounting
//                would only shrink the early tokens' credit by γ^length.
//   λ = 0.95     PPO's and TRL's: most of the Monte-Carlo return, a little of V's lower variance.
//   value_coef   0.5, the baselines' vf_coef: the trunk learns the value features at half the
//                policy's weight; 0 keeps the trunk's gradient the policy's alone.
//   value_lr     1e-3: a linear read-out of RMS-normed rows (entries of size ~1), whose Adam step
//                moves V by at most ~lr·model_dim, under 1 for model_dim < 1000 while rewards lie
//                in [0, 1]; b alone moves by ~lr a step.
//   value_clip   0: PPO2's value clipping leaves V within ε_v of V_old, which with one update per
//                batch (μ = 1, V = V_old) never binds, and larger studies (Engstrom et al. 2020,
//                Andrychowicz et al. 2021) found it no help; TRL's 0.2 is one flag away.
// Advantages are not whitened by default (--whiten-advantages does, over the batch's completion
// tokens): the verifiers' and rubrics' rewards lie in [0, 1], so GAE's advantages are already on a
// fixed scale, and in a batch where every reward agrees (common early: all 0) whitening would blow
// the value head's small errors up to unit-size advantages, a gradient from noise.
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
  double ema_decay = 0.9;          // kReinforceEma
  GaeConfig gae;                   // kPpoGae: γ, λ
  double value_coef = 0.5;         // kPpoGae: the value loss's weight in the trunk's gradient
  double value_lr = 1e-3;          // kPpoGae: the value head's Adam learning rate
  double value_clip = 0.0;         // kPpoGae: ε_v of the value loss (0: not clipped)
  bool whiten_advantages = false;  // kPpoGae: whiten GAE's advantages over the batch
  PolicyLossConfig loss;           // objective, ε_low/ε_high, β, aggregation
  int64_t updates_per_batch = 1;   // μ
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
  // kPpoGae: the value loss and explained variance 1 − Var(R − V)/Var(R) of the first update
  // (V = V_old: how well the head predicted this batch before learning from it; NaN when every
  // return agrees), and the fraction of tokens whose value clip binds, over all μ updates (0 with
  // μ = 1 or value_clip 0).
  double value_loss = 0, value_clip_fraction = 0, explained_variance = 0;
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
