// Preference pairs built on-policy (issue 18, item 5): sample the policy on train problems of a
// task mixture, score every completion with its task's verifier, and pair the best completion
// of each problem against its worst (the first of each in sampling order when rewards tie).
// Problems whose completions all score the same give no pair (they say nothing about what to
// prefer) and are counted.
#pragma once

#include <cstdint>
#include <vector>

#include "data/bpe_tokenizer.hpp"
#include "data/chat_format.hpp"
#include "eval/model_scorer.hpp"
#include "posttrain/preference_pairs.hpp"
#include "posttrain/task_conversations.hpp"

namespace nanogpt {

struct PolicyPairOptions {
  int64_t problems = 256;  // train problems sampled (the mixture's stream from its start)
  int64_t group_size = 8;  // completions per problem
  int64_t max_tokens = 24;
  double temperature = 1.0;
  uint64_t seed = 0;
  int64_t seq_len = 0;  // the model's context for prompt + completion
};

struct PolicyPairs {
  std::vector<PreferencePair> pairs;
  int64_t problems = 0;
  int64_t uniform_problems = 0;  // every completion scored the same: no pair
  double mean_reward = 0;        // over all completions
};

PolicyPairs sample_policy_pairs(ModelScorer& scorer, const BpeTokenizer& tokenizer,
                                const ChatTokens& chat, const std::vector<TaskCell>& cells,
                                const PolicyPairOptions& options);

}  // namespace nanogpt
