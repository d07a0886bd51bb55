// The built-in rubric for open-ended fortune-style answers (issue 18, item 3): prompts "Tell me
// a short fortune about <topic>." and criteria a program can check without a judge:
//   essential  length           3 to 60 words
//   important  no-repetition    at most 10% of the word 3-grams repeat an earlier one
//   important  mentions-topic   a word of the prompt's topic (per prompt: a regex of whole
//                               words, ignoring case — "cat" does not count in "education")
//   optional   ends-a-sentence  the last line ends with . ! or ? (then maybe a closing quote)
//   pitfall    prompt-leak      the answer repeats the prompt, writes "Question:" or "Answer:"
//                               (a model continuing a prompt format) or special-token text "<|"
// With the default weights a response meeting everything scores 1, and the leak costs 0.9/2.7 =
// 1/3 of the reward. It is built as the JSON a rubric file holds and read by the same loader, so
// `nanogpt evals make-rubric --builtin fortune-answers` writes a file one can edit.
#pragma once

#include <string>

#include "eval/rubric.hpp"

namespace nanogpt {

inline constexpr const char* kFortuneRubricName = "fortune-answers";

// The rubric file's text (two-space indented JSON).
std::string builtin_fortune_rubric_json();
Rubric builtin_fortune_rubric();

}  // namespace nanogpt
