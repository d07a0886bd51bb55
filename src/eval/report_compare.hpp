// Comparing two reports of the same suite (issue 17, item 5, `nanogpt evals compare`): cases
// matched by name, per-case changes, each evaluator's averages with their deltas, and whether
// an aggregate change is significant:
// - assertions: McNemar's exact test on the paired pass/fail of each matched case (a case
//   passes as in eval_report.hpp): with b cases passing only in OLD and c only in NEW, the
//   two-sided p-value is min(1, 2·P[Bin(b + c, ½) ≤ min(b, c)]) (1 when b + c = 0);
// - scores (and assertions' values too): a paired bootstrap of the mean difference NEW − OLD
//   over matched cases — `resamples` resamples of the cases with replacement, drawn from a
//   seeded Rng, the 95% percentile interval (the 2.5% and 97.5% order statistics of the
//   resampled means, lower rank floor, upper rank ceil).
// A change is significant at level 0.05 when p < 0.05 (McNemar), or when the interval leaves
// out 0 (bootstrap). Cases in only one report are listed as added or removed.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "eval/eval_report.hpp"

namespace nanogpt {

// Two-sided exact McNemar p-value for b and c discordant pairs.
double mcnemar_exact_p(int64_t b, int64_t c);

struct BootstrapInterval {
  double mean = 0;  // the mean difference over the cases
  double lo = 0, hi = 0;
};
// The paired bootstrap of mean(diffs) (diffs = NEW − OLD per case); needs at least one value.
BootstrapInterval paired_bootstrap(std::span<const double> diffs, int64_t resamples, uint64_t seed,
                                   double confidence = 0.95);

struct EvaluatorComparison {
  std::string evaluator;
  OutcomeKind kind = OutcomeKind::kScore;
  bool higher_is_better = true;
  int64_t matched = 0;                 // cases with the evaluator in both reports
  double old_mean = 0, new_mean = 0;   // over the matched cases
  BootstrapInterval bootstrap;         // of new − old
  bool bootstrap_significant = false;  // the interval leaves out 0
  // Assertions: cases passing in both, only in old (b), only in new (c), in neither.
  int64_t both = 0, only_old = 0, only_new = 0, neither = 0;
  double mcnemar_p = 1;
  bool mcnemar_significant = false;
};

struct CaseChange {
  std::string name;
  std::string evaluator;
  double old_value = 0, new_value = 0;
  bool old_passed = false, new_passed = false;  // assertions
  OutcomeKind kind = OutcomeKind::kScore;
};

struct ReportComparison {
  int64_t resamples = 0;
  uint64_t seed = 0;
  std::vector<std::string> added, removed;  // case names in only NEW, only OLD
  std::vector<EvaluatorComparison> evaluators;
  std::vector<CaseChange> changes;  // matched cases whose summary moved (pass flips, values)
};

ReportComparison compare_reports(const EvalReport& old_report, const EvalReport& new_report,
                                 int64_t resamples, uint64_t seed);

// A terminal (and Markdown-compatible) rendering.
std::string comparison_text(const ReportComparison& cmp, const EvalReport& old_report,
                            const EvalReport& new_report);

}  // namespace nanogpt
