// Per-criterion rates over many scored responses (rubric_score.hpp): how often each criterion was
// met (for a pitfall: how often the mistake was made) and its mean score, with the mean reward —
// what a reinforcement-learning run reports before and after, criterion by criterion, and what
// `nanogpt evals rubric` prints. Criteria are kept by name (validate_rubric gives a name one
// class and weight), in the order first seen; a per-prompt criterion counts the responses to the
// prompts that have it.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "eval/rubric_score.hpp"

namespace nanogpt {

struct CriterionRate {
  std::string criterion;
  WeightClass weight_class = WeightClass::kEssential;
  double weight = 0;
  int64_t responses = 0;  // responses it was checked on
  int64_t satisfied = 0;
  double mean_score = 0;

  double rate() const {
    return responses > 0 ? static_cast<double>(satisfied) / static_cast<double>(responses) : 0;
  }
};

struct RubricRates {
  int64_t responses = 0;
  double mean_reward = 0;
  double reward_standard_error = 0;  // s/√n (0 for fewer than 2 responses)
  std::vector<CriterionRate> criteria;
};

RubricRates rubric_rates(std::span<const RubricScore> scores);

// A table, one row per criterion: class, weight, responses, rate and mean score; then the mean
// reward. With `before`, each rate and the reward before, after and the change (criteria of
// either, matched by name).
std::string rubric_rates_table(const RubricRates& rates, const RubricRates* before = nullptr);

}  // namespace nanogpt
