// The report of running a suite on a checkpoint (issue 17, item 5): every case's inputs, what
// the model produced per sample, every evaluator's outcome, per-case summaries over samples
// (mean@n, pass@k) and suite averages with standard errors. Written as JSON (the full record;
// report_json ∘ parse_report is the identity on bytes), as Markdown and as a terminal table.
//
// Summaries: an evaluator's outcomes over a case's n samples give its mean (mean@n); an
// assertion's also the number passed c, pass@k for k = 1, 2, 4, ... < n and n (pass_at_k.hpp),
// and the case counts as passed when at least half its samples passed (with one sample: it
// passed) — what compare's McNemar test pairs. A label evaluator's summary is its most frequent
// label (the first of equal ones). Averages are over cases: the mean of the case means and its
// standard error s/√m over the m cases that have the evaluator (0 when m = 1); labels have none.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "eval/evaluators.hpp"
#include "eval/suite_case.hpp"

namespace nanogpt {

struct SampleRecord {
  std::string output;            // generate: the completion
  int64_t generated_tokens = 0;  // generate: tokens sampled (the stop string's included)
  double duration_seconds = 0;
  std::vector<double> choice_logprobs;  // choice
  double text_logprob = 0;              // text
  int64_t text_tokens = 0;              // text
  std::vector<EvaluatorOutcome> outcomes;
};

using PassAtK = std::vector<std::pair<int64_t, double>>;  // (k, pass@k)

struct EvaluatorSummary {
  std::string evaluator;
  OutcomeKind kind = OutcomeKind::kScore;
  bool higher_is_better = true;
  int64_t n = 0;             // samples
  double mean = 0;           // mean@n of the values
  int64_t passed = 0;        // assertions: samples that passed
  bool case_passed = false;  // assertions: at least half the samples passed
  PassAtK pass_at_k;         // assertions
  std::string label;         // labels: the most frequent
};

struct CaseRecord {
  std::string name;
  CaseKind kind = CaseKind::kGenerate;
  nlohmann::ordered_json inputs = nlohmann::ordered_json::object();  // as in the suite file
  nlohmann::ordered_json expected;                                   // null if none
  double duration_seconds = 0;
  std::vector<SampleRecord> samples;
  std::vector<EvaluatorSummary> summaries;
};

struct AverageRecord {
  std::string evaluator;
  OutcomeKind kind = OutcomeKind::kScore;
  bool higher_is_better = true;
  int64_t cases = 0;
  double mean = 0;
  double standard_error = 0;
  double pass_rate = 0;  // assertions: the fraction of cases that passed
  PassAtK pass_at_k;     // assertions: the mean over the cases with at least k samples
};

struct EvalReport {
  std::string suite;       // the suite's name
  std::string suite_path;  // the file it was read from
  std::string checkpoint;
  std::string tokenizer;
  uint64_t seed = 0;
  int64_t repeats = 1;
  int64_t threads = 1;
  double duration_seconds = 0;
  std::vector<CaseRecord> cases;
  std::vector<AverageRecord> averages;
};

// Fills every case's summaries and the report's averages from the samples.
void summarize_report(EvalReport& report);

// The case's inputs and expected output as the suite file gives them.
nlohmann::ordered_json case_inputs_json(const SuiteCase& c);
nlohmann::ordered_json case_expected_json(const SuiteCase& c);

std::string report_json(const EvalReport& report);
// Every error is an InputError naming the file and the field (cases by index and name).
EvalReport parse_report(std::string_view text, const std::string& path);
EvalReport load_report(const std::string& path);
void save_report(const EvalReport& report, const std::string& path);  // atomically

std::string report_markdown(const EvalReport& report);
// Columns: case, inputs, expected, output (texts cut to fit), scores, assertions, duration;
// then the averages row with ± standard errors.
std::string report_table(const EvalReport& report);

// One line per line of text, escaped (\n, |) and cut to `width` code points with "…".
std::string one_line(std::string_view text, size_t width);
// The same over the end of the text: "…" and its last width - 1 code points.
std::string one_line_tail(std::string_view text, size_t width);

}  // namespace nanogpt
