// Rollouts (issue 18, item 7): what `nanogpt rl` samples at a step, and what `nanogpt bench
// rollout` times. Shared so the benchmark measures exactly the sampling RL does.
//
// A step's prompts: problems s·P .. s·P + P - 1 of the task mixture's train stream (cells
// interleaved, as mixture_problems draws them), rendered in the chat format. Each prompt gets
// group_size completions, sampled at the settings' temperature until <|assistant_end|>, the
// model's <|endoftext|> or max_tokens. Sample g of prompt i draws from a generator of its own,
// seeded by (seed, step, first_prompt + i, g), so what it samples does not depend on how the
// samples are batched: all together (one prefill per prompt, its K/V cache copied to each sample,
// every sample decoded as one batch, finished ones leaving it: ModelScorer::generate) or one
// sequence at a time (the batch-1 figure of the benchmark).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "data/bpe_tokenizer.hpp"
#include "data/chat_format.hpp"
#include "eval/model_scorer.hpp"
#include "eval/task_instance.hpp"
#include "model/flop_count.hpp"
#include "model/sampling.hpp"
#include "posttrain/task_conversations.hpp"

namespace nanogpt {

// The prompts of step `step`: its `prompts` problems of the mixture's train split.
std::vector<TaskInstance> rollout_problems(const std::vector<TaskCell>& cells, uint64_t seed,
                                           int64_t step, int64_t prompts);

// The problem's question as the scorer takes a prompt: rendered in the chat format (ending with
// <|assistant_start|>) without its first id, <|endoftext|>, which the scorer puts in front of
// every sequence. InputError unless prompt and max_tokens fit a context of seq_len + 1 tokens
// (the rows RL trains on hold the begin token, the prompt and the completion).
std::vector<uint32_t> rollout_prompt(const TaskInstance& problem, const BpeTokenizer& tokenizer,
                                     const ChatTokens& chat, int64_t seq_len, int64_t max_tokens);

struct RolloutSampling {
  int64_t group_size = 8;  // completions per prompt
  int64_t max_tokens = 24;
  SamplingSettings sampling;
  uint64_t seed = 0;
  int64_t step = 0;
  // The index in the step of prompts[0]: a rank sampling its slice of a step's prompts draws
  // with the generators the whole step would use, so the rollouts do not depend on the ranks.
  size_t first_prompt = 0;
  uint32_t assistant_end = 0;  // ends a completion (kept as its last token)
};

enum class RolloutBatching {
  kBatched,     // every sample of every prompt in one batched decode (what RL runs)
  kOneAtATime,  // one sequence after the other, each with its own prefill: batch 1
};

// Per prompt, its group_size completions (tokens up to and including <|assistant_end|>, or
// ending where the model drew <|endoftext|>: hit_eot), the same for either batching.
std::vector<std::vector<GeneratedSample>> sample_completions(
    ModelScorer& scorer, std::span<const std::vector<uint32_t>> prompts,
    const RolloutSampling& settings, RolloutBatching batching = RolloutBatching::kBatched);

// The products a batched rollout multiplies out (model/flop_count.hpp's counting): each prompt's
// prefill (its <|endoftext|> and ids; the logits of its last row only, shared by its samples),
// then each sample's fed tokens — every draw but its last feeds the token drawn — through the
// blocks (attention over the prompt and the sample's tokens before it) and the head. What a
// rollout's time turns into a rate (`nanogpt bench rollout`).
FlopCount rollout_flops(const Config& config, int64_t window_blocks,
                        std::span<const std::vector<uint32_t>> prompts,
                        std::span<const std::vector<GeneratedSample>> completions);

// The tokens the model sampled for a completion: its tokens and the <|endoftext|> it drew, if
// it did (RL trains on that token too; a rollout's tokens/s counts it).
int64_t sampled_tokens(const GeneratedSample& completion);

}  // namespace nanogpt
