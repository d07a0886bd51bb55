// A checkpoint's submission to a leaderboard: a choice suite's report turned into predictions
// (eval/suite_predictions.hpp), on hand-made reports and suites.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "eval/suite_predictions.hpp"
#include "support/input_error.hpp"

namespace nanogpt {
namespace {

EvalReport choice_report(const std::vector<std::vector<double>>& logprobs) {
  EvalReport r;
  for (size_t i = 0; i < logprobs.size(); ++i) {
    CaseRecord c;
    c.name = "case-" + std::to_string(i);
    c.kind = CaseKind::kChoice;
    SampleRecord s;
    s.choice_logprobs = logprobs[i];
    c.samples.push_back(s);
    r.cases.push_back(c);
  }
  return r;
}

// The InputError `fn` throws mentions `part`.
void expect_input_error(const auto& fn, const std::string& part) {
  const std::string message = input_error(fn);
  EXPECT_NE(message.find(part), std::string::npos) << "error: '" << message << "'";
}

TEST(SuitePredictions, ZeroOnePicksTheMostLikelyChoiceFirstOfTies) {
  const EvalReport r =
      choice_report({{-3.0, -1.5, -2.0}, {-0.5, -4.0}, {-2.0, -2.0, -1.0, -1.0}, {-7.0, -7.0}});
  EXPECT_EQ(predictions_from_report(r, LossKind::kZeroOne, "s.json"), "1\n0\n2\n0\n");
}

TEST(SuitePredictions, BrierIsTheProbabilityOfChoiceOneBetweenTwo) {
  const std::vector<std::vector<double>> ll = {{-1.0, -1.0}, {-30.0, -2.5}, {-0.25, -9.75}};
  const std::string text = predictions_from_report(choice_report(ll), LossKind::kBrier, "s.json");
  // Parsed back as the board parses a file: each line the probability to round-trip precision.
  size_t pos = 0;
  for (const auto& pair : ll) {
    const size_t end = text.find('\n', pos);
    ASSERT_NE(end, std::string::npos);
    const double p = std::stod(text.substr(pos, end - pos));
    const double e1 = std::exp(pair[1]), e0 = std::exp(pair[0]);
    EXPECT_NEAR(p, e1 / (e0 + e1), 1e-15);
    pos = end + 1;
  }
  EXPECT_EQ(pos, text.size());
}

TEST(SuitePredictions, ReportsThatCannotMakeASubmissionAreErrorsNamingTheCase) {
  EvalReport r = choice_report({{-1.0, -2.0}, {-1.0, -2.0}});
  r.cases[1].kind = CaseKind::kGenerate;
  expect_input_error([&] { predictions_from_report(r, LossKind::kZeroOne, "s.json"); },
                     "suite 's.json' case 'case-1' is a generate case");
  expect_input_error(
      [&] {
        predictions_from_report(choice_report({{-1.0, -2.0, -3.0}}), LossKind::kBrier, "s.json");
      },
      "case 'case-0' has 3 choices; a brier board needs two");
  expect_input_error(
      [&] {
        predictions_from_report(choice_report({{-1.0, std::numeric_limits<double>::quiet_NaN()}}),
                                LossKind::kZeroOne, "s.json");
      },
      "non-finite log-likelihood");
}

TEST(SuitePredictions, SuitesAreCheckedBeforeAnyModelRuns) {
  Suite s;
  for (int i = 0; i < 3; ++i) {
    SuiteCase c;
    c.name = "c" + std::to_string(i);
    c.kind = CaseKind::kChoice;
    c.context = "x";
    c.choices = {"a", "b"};
    s.cases.push_back(c);
  }
  EXPECT_NO_THROW(check_suite_for_submission(s, LossKind::kBrier, 3, "s.json"));
  expect_input_error([&] { check_suite_for_submission(s, LossKind::kZeroOne, 4, "s.json"); },
                     "suite 's.json' has 3 cases but the board's holdout has 4 rows");
  s.cases[2].choices.push_back("c");
  EXPECT_NO_THROW(check_suite_for_submission(s, LossKind::kZeroOne, 3, "s.json"));
  expect_input_error([&] { check_suite_for_submission(s, LossKind::kBrier, 3, "s.json"); },
                     "case 'c2' has 3 choices");
  s.cases[1].kind = CaseKind::kText;
  expect_input_error([&] { check_suite_for_submission(s, LossKind::kZeroOne, 3, "s.json"); },
                     "case 'c1' is a text case");
}

TEST(SuitePredictions, PredictionsInMemoryScoreAsTheSameFileWould) {
  Holdout h;
  h.path = "labels.txt";
  h.labels = {1, 0, 2, 2};
  h.num_classes = 3;
  const ScoredSubmission s =
      score_predictions("ckpt on s.json", "1\n1\n2\n0\n", h, LossKind::kZeroOne);
  EXPECT_EQ(s.path, "ckpt on s.json");
  EXPECT_EQ(s.losses, (std::vector<double>{0, 1, 0, 1}));
  EXPECT_DOUBLE_EQ(s.mean_loss, 0.5);
  expect_input_error([&] { score_predictions("ckpt on s.json", "1\n", h, LossKind::kZeroOne); },
                     "submission 'ckpt on s.json' has 1 rows but the holdout has 4");
}

}  // namespace
}  // namespace nanogpt
