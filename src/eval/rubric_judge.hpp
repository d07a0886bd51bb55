// The judge of a rubric's `judge` checks (rubric.hpp): something that reads a prompt asking
// whether a response satisfies a criterion and gives its probability of "Yes". A model judge
// (ModelJudge, below) is the one built in; a stronger judge — another checkpoint, a remote
// model — is another implementation of RubricJudge, and nothing else changes.
//
// The prompt (judge_prompt) is, in the zero-shot style of the task prompts:
//
//   Question: <the rubric prompt>
//   Response: <the response>
//   Criterion: <the criterion's description>
//   Does the response satisfy the criterion? Answer:
//
// For a pitfall the description states the mistake ("The response repeats the question."), so
// "Yes" means the response makes it.
#pragma once

#include <cstddef>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "data/bpe_tokenizer.hpp"
#include "eval/model_scorer.hpp"

namespace nanogpt {

class RubricJudge {
 public:
  virtual ~RubricJudge() = default;
  // P("Yes") in [0, 1] for a prompt as judge_prompt writes it.
  virtual double yes_probability(std::string_view prompt) = 0;
  // The same for many prompts: scoring many responses (rubric_score.hpp) asks every judge
  // question of the batch here at once, so a judge can batch its work. The default asks one by
  // one.
  virtual std::vector<double> yes_probabilities(std::span<const std::string> prompts);
};

// The judge prompt above.
std::string judge_prompt(std::string_view question, std::string_view response,
                         std::string_view criterion);

// softmax over two answers: exp(yes) / (exp(yes) + exp(no)) for log-likelihoods yes and no,
// computed without overflow; 0.5 when they are equal.
double yes_probability_from_logprobs(double yes_logprob, double no_logprob);

// A checkpoint as judge: the log-likelihoods of the continuations " Yes" and " No" after the
// prompt (ModelScorer::continuation_logprobs: the prompt once into a K/V cache, both answers from
// copies of it), and p = softmax of the two. Each answer's log-likelihood is summed over its
// tokens, should the tokenizer split it. Prompts are scored max_prompts_per_call at a time in
// one batched scorer call (kDefaultPromptsPerCall unless set). Like its scorer, a
// ModelJudge serves one thread at a time.
class ModelJudge final : public RubricJudge {
 public:
  static constexpr size_t kDefaultPromptsPerCall = 16;

  // The tokenizer must be the model's (ModelScorer refuses ids outside its vocabulary).
  ModelJudge(ModelScorer& scorer, const BpeTokenizer& tokenizer,
             size_t max_prompts_per_call = kDefaultPromptsPerCall);

  double yes_probability(std::string_view prompt) override;
  std::vector<double> yes_probabilities(std::span<const std::string> prompts) override;

 private:
  ModelScorer& scorer_;
  const BpeTokenizer& tokenizer_;
  size_t max_prompts_per_call_;
  std::vector<std::vector<uint32_t>> answers_;  // " Yes", " No"
};

}  // namespace nanogpt
