// `evals compare`'s statistics (eval/report_compare): McNemar's exact test against binomial
// tails computed by hand, the paired bootstrap on crafted differences, and case matching.
#include <gtest/gtest.h>

#include <cmath>

#include "eval/report_compare.hpp"
#include "runtime/error.hpp"
#include "runtime/random.hpp"

namespace nanogpt {
namespace {

TEST(EvalCompare, McNemarExactMatchesHandComputedBinomialTails) {
  // b = 1, c = 9: 2·(C(10,0) + C(10,1))/2^10 = 22/1024.
  EXPECT_NEAR(mcnemar_exact_p(1, 9), 22.0 / 1024, 1e-12);
  EXPECT_NEAR(mcnemar_exact_p(9, 1), 22.0 / 1024, 1e-12);
  // b = 0, c = 5: 2/32.
  EXPECT_NEAR(mcnemar_exact_p(0, 5), 2.0 / 32, 1e-12);
  // b = 3, c = 4: 2·(1 + 7 + 21 + 35)/128 = 1, capped at 1.
  EXPECT_NEAR(mcnemar_exact_p(3, 4), 1.0, 1e-12);
  // b = 2, c = 12: 2·(1 + 14 + 91)/16384.
  EXPECT_NEAR(mcnemar_exact_p(2, 12), 212.0 / 16384, 1e-12);
  EXPECT_DOUBLE_EQ(mcnemar_exact_p(0, 0), 1.0);
  // Large counts stay finite and symmetric: b = 400, c = 600 is far below 0.05.
  EXPECT_LT(mcnemar_exact_p(400, 600), 1e-9);
  EXPECT_GT(mcnemar_exact_p(400, 600), 0);
  EXPECT_THROW(mcnemar_exact_p(-1, 2), InputError);
}

TEST(EvalCompare, BootstrapOnCraftedDifferences) {
  // Constant differences: every resample has the same mean.
  const std::vector<double> same(20, 0.25);
  BootstrapInterval b = paired_bootstrap(same, 1000, 1);
  EXPECT_DOUBLE_EQ(b.mean, 0.25);
  EXPECT_DOUBLE_EQ(b.lo, 0.25);
  EXPECT_DOUBLE_EQ(b.hi, 0.25);
  // Two cases {0, 1}: resampled means are 0, ½, 1 with probability ¼, ½, ¼, so over 10000
  // resamples the 2.5% and 97.5% order statistics are 0 and 1.
  const std::vector<double> two = {0, 1};
  b = paired_bootstrap(two, 10000, 2);
  EXPECT_DOUBLE_EQ(b.mean, 0.5);
  EXPECT_DOUBLE_EQ(b.lo, 0.0);
  EXPECT_DOUBLE_EQ(b.hi, 1.0);
  // n = 400 differences of ±1 with mean 0.2 (240 of +1): the interval is the normal one,
  // mean ± 1.96·σ/√n with σ² = 1 − 0.04 (half-width 0.096), to within 10% of its half-width
  // (Monte-Carlo and discreteness), and it leaves out 0.
  std::vector<double> d(400, -1.0);
  for (size_t i = 0; i < 240; ++i) d[i] = 1.0;
  b = paired_bootstrap(d, 10000, 3);
  const double half = 1.96 * std::sqrt(0.96 / 400);
  EXPECT_NEAR(b.mean, 0.2, 1e-12);
  EXPECT_NEAR(b.hi - b.mean, half, 0.1 * half);
  EXPECT_NEAR(b.mean - b.lo, half, 0.1 * half);
  EXPECT_GT(b.lo, 0);
  // Balanced ±1: the interval holds 0.
  std::vector<double> balanced(400, -1.0);
  for (size_t i = 0; i < 200; ++i) balanced[i] = 1.0;
  const BootstrapInterval zero = paired_bootstrap(balanced, 10000, 4);
  EXPECT_LT(zero.lo, 0);
  EXPECT_GT(zero.hi, 0);
  // The same seed gives the same interval.
  const BootstrapInterval again = paired_bootstrap(d, 10000, 3);
  EXPECT_EQ(again.lo, b.lo);
  EXPECT_EQ(again.hi, b.hi);
  EXPECT_THROW(paired_bootstrap(std::vector<double>{}, 10, 1), InputError);
}

CaseRecord assertion_case(const std::string& name, bool passed, double score) {
  CaseRecord c;
  c.name = name;
  SampleRecord s;
  EvaluatorOutcome a;
  a.evaluator = "exact_match";
  a.kind = OutcomeKind::kAssertion;
  a.passed = passed;
  a.value = passed ? 1 : 0;
  EvaluatorOutcome sc;
  sc.evaluator = "bits_per_byte";
  sc.kind = OutcomeKind::kScore;
  sc.higher_is_better = false;
  sc.value = score;
  s.outcomes = {a, sc};
  c.samples.push_back(s);
  return c;
}

TEST(EvalCompare, MatchesCasesByNameAndCountsDiscordantPairs) {
  EvalReport o, n;
  o.suite = n.suite = "s";
  // 12 cases in both: 1 passes only in OLD, 9 only in NEW, 2 in both; bits per byte drops by
  // 0.1 everywhere. OLD also has "gone", NEW has "fresh".
  for (int i = 0; i < 12; ++i) {
    std::string name = "c";
    name += std::to_string(i);
    const bool old_pass = i == 0 || i >= 10;
    const bool new_pass = i >= 1;
    o.cases.push_back(assertion_case(name, old_pass, 1.0 + 0.01 * i));
    n.cases.push_back(assertion_case(name, new_pass, 0.9 + 0.01 * i));
  }
  o.cases.push_back(assertion_case("gone", true, 1));
  n.cases.insert(n.cases.begin(), assertion_case("fresh", false, 1));
  summarize_report(o);
  summarize_report(n);
  const ReportComparison cmp = compare_reports(o, n, 2000, 5);
  ASSERT_EQ(cmp.added, std::vector<std::string>{"fresh"});
  ASSERT_EQ(cmp.removed, std::vector<std::string>{"gone"});
  ASSERT_EQ(cmp.evaluators.size(), 2u);
  const EvaluatorComparison& em = cmp.evaluators[0];
  EXPECT_EQ(em.evaluator, "exact_match");
  EXPECT_EQ(em.matched, 12);
  EXPECT_EQ(em.only_old, 1);
  EXPECT_EQ(em.only_new, 9);
  EXPECT_EQ(em.both, 2);
  EXPECT_EQ(em.neither, 0);
  EXPECT_NEAR(em.mcnemar_p, 22.0 / 1024, 1e-12);
  EXPECT_TRUE(em.mcnemar_significant);
  EXPECT_NEAR(em.new_mean - em.old_mean, 8.0 / 12, 1e-12);
  const EvaluatorComparison& bpb = cmp.evaluators[1];
  EXPECT_NEAR(bpb.bootstrap.mean, -0.1, 1e-12);
  EXPECT_NEAR(bpb.bootstrap.lo, -0.1, 1e-12);  // every difference is −0.1
  EXPECT_TRUE(bpb.bootstrap_significant);
  // 10 pass flips + 12 score changes.
  EXPECT_EQ(cmp.changes.size(), 22u);
  const std::string text = comparison_text(cmp, o, n);
  for (const char* part : {"exact_match", "bits_per_byte", "fresh", "gone", "2000 resamples",
                           "p=0.02148", "yes (McNemar), better"}) {
    EXPECT_NE(text.find(part), std::string::npos) << part << "\n" << text;
  }
}

}  // namespace
}  // namespace nanogpt
