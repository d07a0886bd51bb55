// Running one rubric check (rubric.hpp) on one response, and the text measures the checks use.
// Pure functions: safe on many threads at once. The judge check is not run here: a judge is
// asked for many responses at once (rubric_score.hpp), and judge_check_outcome turns its answer
// into an outcome.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "eval/rubric.hpp"

namespace nanogpt {

// What a check found: satisfied or not, a score in [0, 1] (1 or 0 for every check but the
// verifier, which gives its reward, and the judge, its probability of "Yes"), and why.
struct CheckOutcome {
  bool satisfied = false;
  double score = 0;
  std::string reason;
};

// Runs every check but JudgeCheck (an Error: use judge_check_outcome). `item` gives the prompt
// text (contains' include_prompt) and the task (verifier).
CheckOutcome run_check(const RubricCheck& check, const RubricItem& item, std::string_view response);

// A judge's verdict: satisfied iff p >= 0.5, scored p.
CheckOutcome judge_check_outcome(double yes_probability);

// The response's words: runs of characters between Unicode whitespace, each cut to the span from
// its first to its last letter or number (\p{L}, \p{N}: data/unicode_class), runs without one
// dropped — "Hello, world — ok!" has the words Hello, world and ok; "don't" and "3.5" are one
// word each.
std::vector<std::string> response_words(std::string_view text);

// Of the `n`-grams of the words (ASCII lower-cased), the fraction that repeat an earlier one:
// (count − distinct) / count; 0 when there are fewer than n words.
double repeated_ngram_fraction(const std::vector<std::string>& words, int64_t n);

// The last decimal number in the text (number_text.hpp's pattern, line by line), if any.
std::optional<double> last_number(std::string_view text);

}  // namespace nanogpt
