#include "eval/suite_predictions.hpp"

#include <cmath>
#include <cstdio>

#include "eval/evaluator_metrics.hpp"
#include "runtime/error.hpp"

namespace nanogpt {

namespace {

std::string case_where(const std::string& suite_path, const std::string& name) {
  return "suite '" + suite_path + "' case '" + name + "'";
}

[[noreturn]] void not_a_choice_case(const std::string& where, CaseKind kind) {
  throw InputError(where + " is a " + std::string(case_kind_name(kind)) +
                   " case; a checkpoint's submission needs choice cases only, one per holdout "
                   "row");
}

[[noreturn]] void not_two_choices(const std::string& where, size_t choices) {
  throw InputError(where + " has " + std::to_string(choices) +
                   " choices; a brier board needs two per case (the prediction is the "
                   "probability of choice 1)");
}

}  // namespace

void check_suite_for_submission(const Suite& suite, LossKind kind, size_t rows,
                                const std::string& suite_path) {
  if (suite.cases.size() != rows) {
    throw InputError("suite '" + suite_path + "' has " + std::to_string(suite.cases.size()) +
                     " cases but the board's holdout has " + std::to_string(rows) +
                     " rows; a checkpoint's submission runs one choice case per holdout row, in "
                     "the holdout's order");
  }
  for (const SuiteCase& c : suite.cases) {
    if (c.kind != CaseKind::kChoice) not_a_choice_case(case_where(suite_path, c.name), c.kind);
    if (kind == LossKind::kBrier && c.choices.size() != 2) {
      not_two_choices(case_where(suite_path, c.name), c.choices.size());
    }
  }
}

std::string predictions_from_report(const EvalReport& report, LossKind kind,
                                    const std::string& suite_path) {
  std::string out;
  for (const CaseRecord& c : report.cases) {
    const std::string where = case_where(suite_path, c.name);
    if (c.kind != CaseKind::kChoice || c.samples.empty()) not_a_choice_case(where, c.kind);
    const std::vector<double>& ll = c.samples.front().choice_logprobs;
    for (double v : ll) {
      if (!std::isfinite(v)) {
        throw InputError(where +
                         ": the checkpoint gave a non-finite log-likelihood to a choice; "
                         "it cannot be turned into a prediction");
      }
    }
    char line[64];
    if (kind == LossKind::kZeroOne) {
      std::snprintf(line, sizeof line, "%zu\n", argmax_first(ll));
    } else {
      if (ll.size() != 2) not_two_choices(where, ll.size());
      std::snprintf(line, sizeof line, "%.17g\n", 1.0 / (1.0 + std::exp(ll[0] - ll[1])));
    }
    out += line;
  }
  return out;
}

}  // namespace nanogpt
