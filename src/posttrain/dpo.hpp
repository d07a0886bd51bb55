// `nanogpt dpo`: direct preference optimization (issue 18, item 5) of a checkpoint on pairs of
// replies (preference_pairs.hpp): the loss of dpo_loss.hpp (sigmoid, IPO or hinge, β) on the
// sequence log-probabilities of each pair's chosen and rejected replies (their assistant tokens
// and end token) under the policy and the reference. The reference is the starting checkpoint;
// its log-probabilities are computed once, before the first step, so no second model is kept in
// memory. A step takes pairs_per_step pairs of an epoch's order (a permutation by (seed, epoch)),
// runs both replies of each through the model (sequence_batch.hpp), and steps Muon + Adam (state
// carried over from the checkpoint, rates scaled as SFT's) on the loss's gradient.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "posttrain/chat_eval.hpp"
#include "posttrain/dpo_loss.hpp"
#include "posttrain/policy_pairs.hpp"
#include "runtime/comm.hpp"

namespace nanogpt {

struct DpoOptions {
  std::string checkpoint;
  std::string tokenizer;
  nlohmann::json tokenizer_record;
  std::string pairs;  // JSON Lines of {prompt, chosen, rejected}
  // Or built on-policy from the starting checkpoint (policy_pairs.hpp) on this task mixture's
  // train problems; the pairs are kept as RUN/pairs.jsonl (what a resume reads back).
  std::string tasks;
  PolicyPairOptions policy_pairs;
  std::string run_dir;
  bool resume = false;
  int64_t max_steps = 0;  // stop (with a checkpoint) after this many steps of this invocation
  DpoConfig loss;
  int64_t epochs = 1;
  int64_t pairs_per_step = 16;
  double lr_scale = 0.02;
  double cooldown_frac = 1.0;
  uint64_t seed = 0;
  int64_t window_blocks = 0;
  int64_t checkpoint_every = 0;
  // Held-out task evaluation, before and after (and every eval_every steps), when set.
  std::string eval_tasks;
  int64_t eval_every = 0;
  ChatEvalOptions eval;
  std::string command_line;
  // The ranks that train together (posttrain/stage_ranks.hpp); null: the job's world, so under
  // mpirun every rank takes a slice of each step's pairs (and of the reference scoring).
  Comm* comm = nullptr;
};

struct DpoStepMetrics {
  int64_t step = 0;
  double loss = 0, reward_chosen = 0, reward_rejected = 0, margin = 0, accuracy = 0;
};

struct DpoRunResult {
  int64_t steps = 0, steps_run = 0;
  bool interrupted = false;
  std::string last_checkpoint;
  std::vector<DpoStepMetrics> history;
  bool evaluated = false;
  ChatEvalResult before, after;
};

DpoRunResult run_dpo(const DpoOptions& options);

}  // namespace nanogpt
