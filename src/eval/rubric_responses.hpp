// Responses to a rubric's prompts as a JSON Lines file, what `nanogpt evals rubric --responses`
// scores: one object per line, {"prompt": "<the prompt's name>", "response": "<the text>"};
// blank lines are skipped. Every error is an InputError naming the file, the line and the field
// (an unknown field, a prompt the rubric does not have).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "eval/rubric.hpp"
#include "eval/rubric_score.hpp"

namespace nanogpt {

struct PromptResponse {
  const RubricItem* prompt_item = nullptr;  // in the rubric given to the loader
  std::string response;
};

std::vector<PromptResponse> parse_rubric_responses(std::string_view text, const std::string& path,
                                                   const Rubric& rubric);
std::vector<PromptResponse> load_rubric_responses(const std::string& path, const Rubric& rubric);

// For score_responses: views of the responses (which must outlive them).
std::vector<RubricResponse> rubric_responses_view(const std::vector<PromptResponse>& responses);

}  // namespace nanogpt
