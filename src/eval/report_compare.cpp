#include "eval/report_compare.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>

#include "runtime/error.hpp"
#include "runtime/random.hpp"

namespace nanogpt {

double mcnemar_exact_p(int64_t b, int64_t c) {
  if (b < 0 || c < 0) throw InputError("McNemar's test needs non-negative counts");
  const int64_t n = b + c;
  if (n == 0) return 1.0;
  const int64_t m = std::min(b, c);
  // P[Bin(n, ½) ≤ m] by log-terms (n can be large): C(n, i)·2^-n.
  double tail = 0;
  for (int64_t i = 0; i <= m; ++i) {
    const double log_term =
        std::lgamma(static_cast<double>(n + 1)) - std::lgamma(static_cast<double>(i + 1)) -
        std::lgamma(static_cast<double>(n - i + 1)) - static_cast<double>(n) * std::log(2.0);
    tail += std::exp(log_term);
  }
  return std::min(1.0, 2 * tail);
}

BootstrapInterval paired_bootstrap(std::span<const double> diffs, int64_t resamples, uint64_t seed,
                                   double confidence) {
  if (diffs.empty()) throw InputError("a bootstrap needs at least one paired case");
  if (resamples < 1) throw InputError("a bootstrap needs at least one resample");
  const size_t n = diffs.size();
  BootstrapInterval out;
  double sum = 0;
  for (double d : diffs) sum += d;
  out.mean = sum / static_cast<double>(n);
  Rng rng(seed);
  std::vector<double> means(static_cast<size_t>(resamples));
  for (double& m : means) {
    double s = 0;
    for (size_t i = 0; i < n; ++i) s += diffs[static_cast<size_t>(rng.next_u64() % n)];
    m = s / static_cast<double>(n);
  }
  std::sort(means.begin(), means.end());
  const double alpha = (1 - confidence) / 2;
  const double last = static_cast<double>(resamples - 1);
  const auto lo = static_cast<size_t>(std::floor(alpha * last));
  const auto hi = static_cast<size_t>(std::ceil((1 - alpha) * last));
  out.lo = means[lo];
  out.hi = means[std::min(hi, means.size() - 1)];
  return out;
}

namespace {

const EvaluatorSummary* find_summary(const CaseRecord& c, const std::string& evaluator) {
  for (const EvaluatorSummary& s : c.summaries) {
    if (s.evaluator == evaluator) return &s;
  }
  return nullptr;
}

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

}  // namespace

ReportComparison compare_reports(const EvalReport& old_report, const EvalReport& new_report,
                                 int64_t resamples, uint64_t seed) {
  ReportComparison cmp;
  cmp.resamples = resamples;
  cmp.seed = seed;
  std::map<std::string, const CaseRecord*> old_cases, new_cases;
  for (const CaseRecord& c : old_report.cases) old_cases[c.name] = &c;
  for (const CaseRecord& c : new_report.cases) new_cases[c.name] = &c;
  for (const CaseRecord& c : new_report.cases) {
    if (old_cases.find(c.name) == old_cases.end()) cmp.added.push_back(c.name);
  }
  for (const CaseRecord& c : old_report.cases) {
    if (new_cases.find(c.name) == new_cases.end()) cmp.removed.push_back(c.name);
  }
  // Evaluators in the order of OLD's averages, then NEW's new ones.
  std::vector<const AverageRecord*> evaluators;
  for (const AverageRecord& a : old_report.averages) evaluators.push_back(&a);
  for (const AverageRecord& a : new_report.averages) {
    bool seen = false;
    for (const AverageRecord* e : evaluators) seen = seen || e->evaluator == a.evaluator;
    if (!seen) evaluators.push_back(&a);
  }
  for (const AverageRecord* a : evaluators) {
    EvaluatorComparison e;
    e.evaluator = a->evaluator;
    e.kind = a->kind;
    e.higher_is_better = a->higher_is_better;
    std::vector<double> diffs;
    double old_sum = 0, new_sum = 0;
    for (const CaseRecord& oc : old_report.cases) {
      const auto it = new_cases.find(oc.name);
      if (it == new_cases.end()) continue;
      const EvaluatorSummary* so = find_summary(oc, a->evaluator);
      const EvaluatorSummary* sn = find_summary(*it->second, a->evaluator);
      if (so == nullptr || sn == nullptr || so->kind != sn->kind) continue;
      ++e.matched;
      old_sum += so->mean;
      new_sum += sn->mean;
      diffs.push_back(sn->mean - so->mean);
      if (so->kind == OutcomeKind::kAssertion) {
        if (so->case_passed && sn->case_passed) ++e.both;
        if (so->case_passed && !sn->case_passed) ++e.only_old;
        if (!so->case_passed && sn->case_passed) ++e.only_new;
        if (!so->case_passed && !sn->case_passed) ++e.neither;
      }
      const bool moved = so->kind == OutcomeKind::kAssertion
                             ? so->case_passed != sn->case_passed || so->mean != sn->mean
                             : so->mean != sn->mean;
      if (moved) {
        CaseChange ch;
        ch.name = oc.name;
        ch.evaluator = a->evaluator;
        ch.kind = so->kind;
        ch.old_value = so->mean;
        ch.new_value = sn->mean;
        ch.old_passed = so->case_passed;
        ch.new_passed = sn->case_passed;
        cmp.changes.push_back(ch);
      }
    }
    if (e.matched == 0) {
      cmp.evaluators.push_back(e);
      continue;
    }
    e.old_mean = old_sum / static_cast<double>(e.matched);
    e.new_mean = new_sum / static_cast<double>(e.matched);
    e.bootstrap = paired_bootstrap(diffs, resamples, seed);
    e.bootstrap_significant = e.bootstrap.lo > 0 || e.bootstrap.hi < 0;
    if (e.kind == OutcomeKind::kAssertion) {
      e.mcnemar_p = mcnemar_exact_p(e.only_old, e.only_new);
      e.mcnemar_significant = e.mcnemar_p < 0.05;
    }
    cmp.evaluators.push_back(e);
  }
  return cmp;
}

std::string comparison_text(const ReportComparison& cmp, const EvalReport& old_report,
                            const EvalReport& new_report) {
  std::string out = "OLD: suite '" + old_report.suite + "' on " + old_report.checkpoint +
                    "\nNEW: suite '" + new_report.suite + "' on " + new_report.checkpoint + "\n";
  if (old_report.suite != new_report.suite) {
    out += "note: the reports are of different suites; cases are matched by name\n";
  }
  out +=
      "\n| evaluator | cases | old | new | delta | 95% bootstrap CI | McNemar (b, c, p) | "
      "significant |\n|---|---|---|---|---|---|---|---|\n";
  for (const EvaluatorComparison& e : cmp.evaluators) {
    if (e.matched == 0) {
      out += "| " + e.evaluator + " | 0 | | | | | | (in one report only) |\n";
      continue;
    }
    const double delta = e.new_mean - e.old_mean;
    const bool better = e.higher_is_better ? delta > 0 : delta < 0;
    std::string mc, sig;
    if (e.kind == OutcomeKind::kAssertion) {
      mc = std::to_string(e.only_old) + ", " + std::to_string(e.only_new) +
           ", p=" + fmt("%.4g", e.mcnemar_p);
      sig = e.mcnemar_significant ? "yes (McNemar)" : "no (McNemar)";
    } else {
      sig = e.bootstrap_significant ? "yes (bootstrap)" : "no (bootstrap)";
    }
    if ((e.kind == OutcomeKind::kAssertion ? e.mcnemar_significant : e.bootstrap_significant) &&
        delta != 0) {
      sig += better ? ", better" : ", worse";
    }
    out += "| " + e.evaluator + " | " + std::to_string(e.matched) + " | " +
           fmt("%.4g", e.old_mean) + " | " + fmt("%.4g", e.new_mean) + " | " + fmt("%+.4g", delta) +
           " | [" + fmt("%+.4g", e.bootstrap.lo) + ", " + fmt("%+.4g", e.bootstrap.hi) + "] | " +
           mc + " | " + sig + " |\n";
  }
  out += "\nbootstrap: " + std::to_string(cmp.resamples) + " resamples, seed " +
         std::to_string(cmp.seed) + "; McNemar: exact two-sided binomial test\n";
  out += "\nchanged cases (" + std::to_string(cmp.changes.size()) + "):\n";
  for (const CaseChange& c : cmp.changes) {
    out += "  " + c.name + " " + c.evaluator + ": ";
    if (c.kind == OutcomeKind::kAssertion) {
      out += std::string(c.old_passed ? "pass" : "fail") + " -> " +
             (c.new_passed ? "pass" : "fail") + " (" + fmt("%.4g", c.old_value) + " -> " +
             fmt("%.4g", c.new_value) + ")\n";
    } else {
      out += fmt("%.4g", c.old_value) + " -> " + fmt("%.4g", c.new_value) + "\n";
    }
  }
  out += "added cases (" + std::to_string(cmp.added.size()) + ")";
  for (const std::string& n : cmp.added) out += " " + n;
  out += "\nremoved cases (" + std::to_string(cmp.removed.size()) + ")";
  for (const std::string& n : cmp.removed) out += " " + n;
  out += "\n";
  return out;
}

}  // namespace nanogpt
