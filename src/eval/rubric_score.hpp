// Scoring responses with a rubric (rubric.hpp): every criterion the prompt gets is checked
// (rubric_check.hpp; judge checks by a RubricJudge, rubric_judge.hpp) and the reward is RaR's
// explicit aggregate
//
//   r = Σ_j w_j·c_j / Σ_{j: w_j > 0} w_j,  clamped into [0, 1],
//
// c_j the criterion's score (1 or 0, the verifier's reward, the judge's probability of "Yes"),
// w_j its weight (negative for a pitfall, whose c_j says the mistake was made). Each criterion's
// outcome is reported with its weight and reason, and the aggregate's reason shows the sum (and
// the clamp, when it applied). Reinforcement learning takes the reward (rubric_reward: a Reward
// in [0, 1] whose reason lists every criterion).
//
// Judge checks need a judge: scoring one with judge == nullptr is an InputError naming the
// rubric, the criterion and the fix (rubric_uses_judge tells beforehand).
#pragma once

#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "eval/rubric.hpp"
#include "eval/rubric_judge.hpp"
#include "eval/task_instance.hpp"

namespace nanogpt {

struct CriterionOutcome {
  std::string criterion;  // its name
  WeightClass weight_class = WeightClass::kEssential;
  double weight = 0;
  bool satisfied = false;  // a pitfall: the mistake was made
  double score = 0;        // c_j in [0, 1]
  std::string reason;
};

struct RubricScore {
  std::string prompt;                      // the RubricItem's name
  double reward = 0;                       // in [0, 1]
  double unclamped = 0;                    // the aggregate before the clamp
  std::vector<CriterionOutcome> criteria;  // in the order of Rubric::criteria_for
  std::string reason;
};

// The aggregate of outcomes (their weights and scores): reward, unclamped and reason of a
// RubricScore. Needs a positive weight among them (validate_rubric ensures it per prompt).
RubricScore aggregate_rubric(std::vector<CriterionOutcome> outcomes);

// One response to `prompt_item` (one of rubric.prompts).
RubricScore score(const Rubric& rubric, const RubricItem& prompt_item, std::string_view response,
                  RubricJudge* judge);

// A response to one of the rubric's prompts.
struct RubricResponse {
  const RubricItem* prompt_item = nullptr;
  std::string_view response;
};

// Many responses; every judge question of the batch goes to judge->yes_probabilities in one call
// (so a ModelJudge runs them as batched scorer calls). Equal to score() per response.
std::vector<RubricScore> score_responses(const Rubric& rubric,
                                         std::span<const RubricResponse> responses,
                                         RubricJudge* judge);

// The reward for reinforcement learning: value = reward; reason = the aggregate's reason, then
// one "name: met|not met|pitfall made|pitfall avoided (reason)" per criterion.
Reward rubric_reward(const RubricScore& score);

// A score as one JSON object (`nanogpt evals rubric --scores` writes one per line): {"prompt",
// "reward", "unclamped", "reason", "criteria": [{"name", "class", "weight", "satisfied", "score",
// "reason"}, ...]}.
nlohmann::ordered_json rubric_score_json(const RubricScore& score);

}  // namespace nanogpt
