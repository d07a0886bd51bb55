#include "eval/rubric_judge.hpp"

#include <algorithm>
#include <cmath>

#include "runtime/error.hpp"

namespace nanogpt {

std::vector<double> RubricJudge::yes_probabilities(std::span<const std::string> prompts) {
  std::vector<double> out;
  out.reserve(prompts.size());
  for (const std::string& p : prompts) out.push_back(yes_probability(p));
  return out;
}

std::string judge_prompt(std::string_view question, std::string_view response,
                         std::string_view criterion) {
  std::string p = "Question: ";
  p += question;
  p += "\nResponse: ";
  p += response;
  p += "\nCriterion: ";
  p += criterion;
  p += "\nDoes the response satisfy the criterion? Answer:";
  return p;
}

double yes_probability_from_logprobs(double yes_logprob, double no_logprob) {
  // 1 / (1 + e^(no - yes)), written so the exponent is never positive.
  const double d = no_logprob - yes_logprob;
  if (d <= 0) return 1 / (1 + std::exp(d));
  const double e = std::exp(-d);
  return e / (1 + e);
}

ModelJudge::ModelJudge(ModelScorer& scorer, const BpeTokenizer& tokenizer,
                       size_t max_prompts_per_call)
    : scorer_(scorer),
      tokenizer_(tokenizer),
      max_prompts_per_call_(std::max<size_t>(1, max_prompts_per_call)) {
  answers_ = {tokenizer_.encode(" Yes", false), tokenizer_.encode(" No", false)};
}

double ModelJudge::yes_probability(std::string_view prompt) {
  const std::string p(prompt);
  return yes_probabilities(std::span<const std::string>(&p, 1))[0];
}

std::vector<double> ModelJudge::yes_probabilities(std::span<const std::string> prompts) {
  std::vector<double> out;
  out.reserve(prompts.size());
  for (size_t begin = 0; begin < prompts.size(); begin += max_prompts_per_call_) {
    const size_t end = std::min(prompts.size(), begin + max_prompts_per_call_);
    std::vector<std::vector<uint32_t>> contexts;
    for (size_t i = begin; i < end; ++i) {
      contexts.push_back(tokenizer_.encode(prompts[i], false));
      if (contexts.back().empty()) throw InputError("a judge prompt is empty");
    }
    std::vector<ChoiceRequest> requests;
    for (const auto& c : contexts) requests.push_back({c, answers_});
    const std::vector<std::vector<double>> lps = scorer_.continuation_logprobs(requests);
    for (const std::vector<double>& lp : lps) {
      out.push_back(yes_probability_from_logprobs(lp[0], lp[1]));
    }
  }
  return out;
}

}  // namespace nanogpt
