#include "eval/rubric_score.hpp"

#include <algorithm>
#include <cstdio>

#include "eval/rubric_check.hpp"
#include "runtime/error.hpp"

namespace nanogpt {

namespace {

std::string format_number(double x) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.4g", x);
  return buf;
}

CriterionOutcome outcome_of(const Criterion& c, CheckOutcome o) {
  CriterionOutcome r;
  r.criterion = c.name;
  r.weight_class = c.weight_class;
  r.weight = c.weight();
  r.satisfied = o.satisfied;
  r.score = o.score;
  r.reason = std::move(o.reason);
  return r;
}

std::string verdict_word(const CriterionOutcome& o) {
  if (o.weight_class == WeightClass::kPitfall)
    return o.satisfied ? "pitfall made" : "pitfall avoided";
  return o.satisfied ? "met" : "not met";
}

}  // namespace

RubricScore aggregate_rubric(std::vector<CriterionOutcome> outcomes) {
  RubricScore s;
  double sum = 0, positive = 0;
  std::string terms;
  for (const CriterionOutcome& o : outcomes) {
    sum += o.weight * o.score;
    if (o.weight > 0) positive += o.weight;
    if (o.score == 0 || o.weight == 0) continue;
    const bool minus = o.weight < 0;
    terms += terms.empty() ? (minus ? "-" : "") : (minus ? " - " : " + ");
    terms += format_number(std::abs(o.weight));
    if (o.score != 1) terms += "×" + format_number(o.score);
  }
  if (!(positive > 0)) {
    throw Error(
        "aggregate_rubric: no criterion has a positive weight (validate_rubric refuses that)");
  }
  s.unclamped = sum / positive;
  s.reward = std::clamp(s.unclamped, 0.0, 1.0);
  s.reason = format_number(s.unclamped) + " = (" + (terms.empty() ? "0" : terms) + ") / " +
             format_number(positive) +
             " (the weights of the criteria met, a pitfall made subtracting, over the sum of the "
             "positive weights)";
  if (s.reward != s.unclamped) {
    s.reason += "; clamped to " + format_number(s.reward) +
                (s.unclamped < 0 ? " (the pitfalls made outweigh the criteria met)" : "");
  }
  s.criteria = std::move(outcomes);
  return s;
}

RubricScore score(const Rubric& rubric, const RubricItem& prompt_item, std::string_view response,
                  RubricJudge* judge) {
  const RubricResponse r{&prompt_item, response};
  return std::move(score_responses(rubric, std::span<const RubricResponse>(&r, 1), judge)[0]);
}

std::vector<RubricScore> score_responses(const Rubric& rubric,
                                         std::span<const RubricResponse> responses,
                                         RubricJudge* judge) {
  // Every check but the judge's now; the judge's questions collected, asked in one call, then
  // put in their places.
  std::vector<std::vector<CriterionOutcome>> outcomes(responses.size());
  std::vector<std::string> questions;
  std::vector<std::pair<size_t, size_t>> places;  // (response, criterion) of each question
  for (size_t i = 0; i < responses.size(); ++i) {
    const RubricItem* item = responses[i].prompt_item;
    if (item == nullptr)
      throw Error("score_responses: response " + std::to_string(i) + " has no prompt");
    const std::vector<const Criterion*> criteria = rubric.criteria_for(*item);
    for (size_t j = 0; j < criteria.size(); ++j) {
      const Criterion& c = *criteria[j];
      if (std::holds_alternative<JudgeCheck>(c.check)) {
        if (judge == nullptr) {
          throw InputError("rubric '" + (rubric.path.empty() ? rubric.name : rubric.path) +
                           "': criterion '" + c.name +
                           "' is a judge check and no judge is configured (give a judge "
                           "checkpoint, e.g. `evals rubric --judge DIR`, or remove the criterion)");
        }
        questions.push_back(judge_prompt(item->prompt, responses[i].response, c.description));
        places.emplace_back(i, j);
        outcomes[i].push_back(outcome_of(c, CheckOutcome{}));
      } else {
        outcomes[i].push_back(outcome_of(c, run_check(c.check, *item, responses[i].response)));
      }
    }
  }
  if (!questions.empty()) {
    const std::vector<double> p = judge->yes_probabilities(questions);
    if (p.size() != questions.size()) {
      throw Error("the judge answered " + std::to_string(p.size()) + " of " +
                  std::to_string(questions.size()) + " questions");
    }
    for (size_t q = 0; q < p.size(); ++q) {
      if (!(p[q] >= 0 && p[q] <= 1)) {
        throw Error("the judge gave P(Yes) = " + format_number(p[q]) + ", outside [0, 1]");
      }
      CriterionOutcome& o = outcomes[places[q].first][places[q].second];
      const CheckOutcome j = judge_check_outcome(p[q]);
      o.satisfied = j.satisfied;
      o.score = j.score;
      o.reason = j.reason;
    }
  }
  std::vector<RubricScore> out;
  out.reserve(responses.size());
  for (size_t i = 0; i < responses.size(); ++i) {
    out.push_back(aggregate_rubric(std::move(outcomes[i])));
    out.back().prompt = responses[i].prompt_item->name;
  }
  return out;
}

Reward rubric_reward(const RubricScore& score) {
  Reward r;
  r.value = score.reward;
  r.reason = score.reason;
  for (const CriterionOutcome& o : score.criteria) {
    r.reason += "; " + o.criterion + ": " + verdict_word(o) + " (" + o.reason + ")";
  }
  return r;
}

nlohmann::ordered_json rubric_score_json(const RubricScore& score) {
  nlohmann::ordered_json j;
  j["prompt"] = score.prompt;
  j["reward"] = score.reward;
  j["unclamped"] = score.unclamped;
  j["reason"] = score.reason;
  j["criteria"] = nlohmann::ordered_json::array();
  for (const CriterionOutcome& o : score.criteria) {
    j["criteria"].push_back({{"name", o.criterion},
                             {"class", weight_class_name(o.weight_class)},
                             {"weight", o.weight},
                             {"satisfied", o.satisfied},
                             {"score", o.score},
                             {"reason", o.reason}});
  }
  return j;
}

}  // namespace nanogpt
