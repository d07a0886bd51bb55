// Evaluators on hand-computed cases, the choice and text metrics against their definitions,
// pass@k against brute-force enumeration of subsets, and spec errors.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "eval/evaluator_metrics.hpp"
#include "eval/evaluators.hpp"
#include "eval/pass_at_k.hpp"
#include "eval/task_registry.hpp"
#include "runtime/error.hpp"
#include "runtime/random.hpp"
#include "support/input_error.hpp"

namespace nanogpt {
namespace {

using Json = nlohmann::ordered_json;

std::shared_ptr<const Evaluator> make(const Json& spec) {
  return make_evaluator(spec, "test: ", "evaluators[0]");
}

SuiteCase generate_case(std::optional<std::string> expected) {
  SuiteCase c;
  c.name = std::string("c");
  c.kind = CaseKind::kGenerate;
  c.prompt = std::string("Q");
  c.expected = std::move(expected);
  return c;
}

EvaluatorOutcome run(const Json& spec, const SuiteCase& c, const std::string& output,
                     double seconds = 0) {
  Observation o;
  o.output = output;
  o.duration_seconds = seconds;
  return make(spec)->evaluate(c, o);
}

bool passes(const Json& spec, const std::string& expected, const std::string& output) {
  const EvaluatorOutcome r = run(spec, generate_case(expected), output);
  EXPECT_EQ(r.kind, OutcomeKind::kAssertion);
  EXPECT_FALSE(r.reason.empty());
  EXPECT_EQ(r.value, r.passed ? 1.0 : 0.0);
  return r.passed;
}

TEST(EvalEvaluators, ExactMatch) {
  EXPECT_TRUE(passes("exact_match", "Paris", "Paris"));
  EXPECT_TRUE(passes("exact_match", "Paris", "  Paris\n"));  // strip by default
  EXPECT_FALSE(passes({{"type", "exact_match"}, {"strip", false}}, "Paris", " Paris"));
  EXPECT_FALSE(passes("exact_match", "Paris", "paris"));
  EXPECT_TRUE(passes({{"type", "exact_match"}, {"ignore_case", true}}, "Paris", "pARIS"));
  EXPECT_FALSE(passes("exact_match", "Paris", "Paris."));
  EXPECT_TRUE(passes({{"type", "exact_match"}, {"ignore_punctuation", true}}, "Paris", "Paris."));
  EXPECT_TRUE(passes({{"type", "exact_match"}, {"ignore_punctuation", true}, {"ignore_case", true}},
                     "it's", "ITS!"));
  EXPECT_TRUE(passes({{"type", "exact_match"}, {"values", {"3", "three"}}}, "", "three"));
  EXPECT_FALSE(passes({{"type", "exact_match"}, {"value", "3"}}, "three", "three"));
}

TEST(EvalEvaluators, Contains) {
  EXPECT_TRUE(passes("contains", "42", "the answer is 42."));
  EXPECT_FALSE(passes("contains", "42", "the answer is 41."));
  EXPECT_FALSE(passes({{"type", "contains"}, {"values", {"3", "three"}}}, "", "Three r's"));
  EXPECT_TRUE(passes({{"type", "contains"}, {"values", {"3", "three"}}, {"ignore_case", true}}, "",
                     "Three r's"));
}

TEST(EvalEvaluators, RegexExtractionThenMatch) {
  const Json spec = {{"type", "regex"}, {"pattern", "answer is (-?[0-9]+)"}};
  EXPECT_TRUE(passes(spec, "42", "so the answer is 42, or the answer is 7"));
  const Json last = {{"type", "regex"}, {"pattern", "answer is (-?[0-9]+)"}, {"select", "last"}};
  EXPECT_TRUE(passes(last, "7", "so the answer is 42, or the answer is 7"));
  EXPECT_FALSE(passes(spec, "42", "no answer here"));
  EXPECT_NE(run(spec, generate_case("42"), "nothing").reason.find("no match"), std::string::npos);
  // Group 0 when the pattern has no groups.
  EXPECT_TRUE(passes({{"type", "regex"}, {"pattern", "[0-9]+"}}, "12", "x 12 y 13"));
  EXPECT_TRUE(passes({{"type", "regex"}, {"pattern", "#### (.*)"}, {"ignore_case", true}}, "ab",
                     "#### AB"));
}

TEST(EvalEvaluators, RegexOnAHugeOutputDoesNotCrash) {
  const std::string huge(1 << 20, 'a');
  EXPECT_FALSE(passes({{"type", "regex"}, {"pattern", "(.*)"}}, "x", huge));
  EXPECT_FALSE(passes({{"type", "regex"}, {"pattern", "(a+)b"}}, "x", huge));
  EXPECT_FALSE(passes("numeric", "1", huge));
  // Many lines: every line is searched, the last match is the last line's.
  std::string lines;
  for (int i = 0; i < 20000; ++i) lines += "step " + std::to_string(i) + "\n";
  EXPECT_TRUE(passes({{"type", "numeric"}, {"select", "last"}}, "19999", lines));
  EXPECT_TRUE(passes({{"type", "regex"}, {"pattern", "^step (\\d+)$"}}, "0", lines));
}

TEST(EvalEvaluators, NumericWithTolerance) {
  EXPECT_TRUE(passes("numeric", "42", "It is 42."));
  EXPECT_TRUE(passes("numeric", "1234", "It is 1,234 in total"));
  EXPECT_FALSE(passes("numeric", "42", "It is 43."));
  EXPECT_TRUE(passes({{"type", "numeric"}, {"abs_tol", 1.0}}, "42", "It is 43."));
  EXPECT_FALSE(passes({{"type", "numeric"}, {"abs_tol", 0.5}}, "42", "It is 43."));
  EXPECT_TRUE(passes({{"type", "numeric"}, {"rel_tol", 0.01}}, "1000", "999.5"));
  EXPECT_FALSE(passes({{"type", "numeric"}, {"rel_tol", 0.01}}, "1000", "989"));
  EXPECT_TRUE(passes("numeric", "-3.5", "x = -3.5"));
  EXPECT_TRUE(passes({{"type", "numeric"}, {"select", "last"}}, "7", "3 then 7"));
  EXPECT_FALSE(passes("numeric", "7", "3 then 7"));
  EXPECT_TRUE(passes({{"type", "numeric"}, {"pattern", "= ([0-9.]+)"}}, "2.5", "1 + 1.5 = 2.5"));
  EXPECT_FALSE(passes("numeric", "42", "forty-two"));
  EXPECT_TRUE(passes({{"type", "numeric"}, {"value", 42}}, "", "42"));
  // A case whose expected output is not a number cannot be evaluated.
  const auto problem = make("numeric")->check_case(generate_case("forty"));
  ASSERT_TRUE(problem.has_value());
  EXPECT_EQ(problem->field, "expected");
}

TEST(EvalEvaluators, VerifierByName) {
  SuiteCase c = generate_case(std::nullopt);
  c.task = task_from_canonical("countdown:1,3,7,10,25,50=175", 4);
  const EvaluatorOutcome ok = run("verifier", c, " 7 * 25\n");
  EXPECT_TRUE(ok.passed);
  EXPECT_EQ(ok.value, 1.0);
  const EvaluatorOutcome bad = run("verifier", c, " 7 * 50\n");
  EXPECT_FALSE(bad.passed);
  EXPECT_EQ(bad.value, 0.0);
  EXPECT_NE(bad.reason.find("350"), std::string::npos);
  EXPECT_FALSE(make({{"type", "verifier"}, {"task", "countdown"}})->check_case(c).has_value());
  const auto wrong = make({{"type", "verifier"}, {"task", "addition"}})->check_case(c);
  ASSERT_TRUE(wrong.has_value());
  EXPECT_EQ(wrong->field, "task");
  const auto missing = make("verifier")->check_case(generate_case("1"));
  ASSERT_TRUE(missing.has_value());
  EXPECT_EQ(missing->field, "task");
  EXPECT_NE(input_error([] {
              make({{"type", "verifier"}, {"task", "chess"}});
            }).find("known: "),
            std::string::npos);
}

TEST(EvalEvaluators, RegexLabel) {
  const Json spec = {{"type", "regex_label"}, {"pattern", "sentiment: (\\w+)"}};
  const EvaluatorOutcome r = run(spec, generate_case(std::nullopt), "sentiment: positive!");
  EXPECT_EQ(r.kind, OutcomeKind::kLabel);
  EXPECT_EQ(r.label, "positive");
  EXPECT_EQ(run(spec, generate_case(std::nullopt), "meh").label, "none");
}

TEST(EvalEvaluators, MaxDuration) {
  const Json spec = {{"type", "max_duration"}, {"seconds", 2.0}};
  EXPECT_TRUE(run(spec, generate_case("x"), "", 1.5).passed);
  EXPECT_TRUE(run(spec, generate_case("x"), "", 2.0).passed);
  EXPECT_FALSE(run(spec, generate_case("x"), "", 2.5).passed);
  for (CaseKind k : all_case_kinds()) EXPECT_TRUE(make(spec)->accepts(k));
}

SuiteCase choice_case(std::vector<std::string> choices, int64_t gold) {
  SuiteCase c;
  c.name = std::string("choice");
  c.kind = CaseKind::kChoice;
  c.context = std::string("ctx");
  c.choices = std::move(choices);
  c.gold = gold;
  return c;
}

TEST(EvalEvaluators, ChoiceAccuracyHandComputed) {
  // Choice 0: " a" (2 chars), logprob -2 → -1.0 per char. Choice 1: " bbbbbb" (7 chars),
  // logprob -3 → -0.43 per char. Choice 2: " é" (2 chars, 3 bytes), logprob -2.5 → -1.25 per
  // char, -0.83 per byte. acc picks 0 (-2 largest), acc_norm picks 1, acc_bytes picks 1
  // (-3/7 = -0.43 beats -2/2 = -1 and -2.5/3).
  const SuiteCase c = choice_case({" a", " bbbbbb", " \xC3\xA9"}, 1);
  Observation o;
  o.choice_logprobs = {-2.0, -3.0, -2.5};
  EXPECT_FALSE(make("acc")->evaluate(c, o).passed);
  EXPECT_TRUE(make("acc_norm")->evaluate(c, o).passed);
  EXPECT_TRUE(make("acc_bytes")->evaluate(c, o).passed);
  EXPECT_EQ(choice_acc(o.choice_logprobs), 0u);
  EXPECT_EQ(choice_acc_norm(o.choice_logprobs, c.choices), 1u);
  // Characters and bytes differ: "é" is one character and two bytes.
  o.choice_logprobs = {-2.2, -100.0, -2.1};
  EXPECT_EQ(choice_acc_norm(o.choice_logprobs, c.choices), 2u);   // -1.05 beats -1.1
  EXPECT_EQ(choice_acc_bytes(o.choice_logprobs, c.choices), 2u);  // -0.7 beats -1.1
  o.choice_logprobs = {-1.9, -100.0, -2.7};
  EXPECT_EQ(choice_acc_norm(o.choice_logprobs, c.choices), 0u);   // -0.95 beats -1.35
  EXPECT_EQ(choice_acc_bytes(o.choice_logprobs, c.choices), 2u);  // -0.9 beats -0.95
  // Ties go to the first.
  EXPECT_EQ(argmax_first(std::vector<double>{-1, -1, -2}), 0u);
  EXPECT_EQ(utf8_characters("a\xC3\xA9\xE2\x82\xAC"), 3);
  const EvaluatorOutcome r = make("acc")->evaluate(c, o);
  EXPECT_NE(r.reason.find("picked choice 0"), std::string::npos);
  EXPECT_NE(r.reason.find("gold is 1"), std::string::npos);
}

TEST(EvalEvaluators, ChoiceMetricsMatchDefinitionOnRandomInputs) {
  Rng rng(11);
  for (int trial = 0; trial < 500; ++trial) {
    const size_t n = 2 + rng.next_u64() % 5;
    std::vector<std::string> choices(n);
    std::vector<double> lp(n);
    for (size_t i = 0; i < n; ++i) {
      const size_t len = 1 + rng.next_u64() % 12;
      for (size_t k = 0; k < len; ++k) choices[i] += (rng.next_u64() % 3 == 0) ? "\xC3\xA9" : "x";
      lp[i] = -rng.uniform(0.1, 30.0);
    }
    size_t best_norm = 0, best_bytes = 0, best = 0;
    for (size_t i = 1; i < n; ++i) {
      const auto chars = [&](size_t k) {
        size_t c = 0;
        for (size_t b = 0; b < choices[k].size(); ++b) c += choices[k][b] != '\xA9';
        return static_cast<double>(c);
      };
      if (lp[i] > lp[best]) best = i;
      if (lp[i] / chars(i) > lp[best_norm] / chars(best_norm)) best_norm = i;
      if (lp[i] / static_cast<double>(choices[i].size()) >
          lp[best_bytes] / static_cast<double>(choices[best_bytes].size())) {
        best_bytes = i;
      }
    }
    EXPECT_EQ(choice_acc(lp), best);
    EXPECT_EQ(choice_acc_norm(lp, choices), best_norm);
    EXPECT_EQ(choice_acc_bytes(lp, choices), best_bytes);
  }
}

TEST(EvalEvaluators, TextMetricsHandComputed) {
  // 4 tokens, 10 bytes, summed log-likelihood -8 nats: loss 2, perplexity e^2,
  // bits per byte 8 / (10 ln 2).
  SuiteCase c;
  c.name = std::string("t");
  c.kind = CaseKind::kText;
  c.text = std::string("0123456789");
  Observation o;
  o.text_logprob = -8.0;
  o.text_tokens = 4;
  const EvaluatorOutcome loss = make("loss")->evaluate(c, o);
  EXPECT_EQ(loss.kind, OutcomeKind::kScore);
  EXPECT_FALSE(loss.higher_is_better);
  EXPECT_DOUBLE_EQ(loss.value, 2.0);
  EXPECT_NEAR(make("perplexity")->evaluate(c, o).value, std::exp(2.0), 1e-12);
  EXPECT_NEAR(make("bits_per_byte")->evaluate(c, o).value, 8.0 / (10.0 * std::log(2.0)), 1e-15);
  EXPECT_DOUBLE_EQ(text_bits_per_byte(-std::log(2.0) * 5, 5), 1.0);
  EXPECT_THROW(text_loss(-1, 0), Error);
}

// Brute force: the fraction of the C(n, k) subsets of k samples (c of n correct) that contain
// at least one correct one.
double pass_at_k_brute(int n, int c, int k) {
  int64_t subsets = 0, hits = 0;
  for (uint32_t mask = 0; mask < (1u << n); ++mask) {
    if (__builtin_popcount(mask) != k) continue;
    ++subsets;
    hits += (mask & ((1u << c) - 1)) != 0;
  }
  return static_cast<double>(hits) / static_cast<double>(subsets);
}

TEST(EvalEvaluators, PassAtKMatchesBruteForce) {
  // Every (n, c, k) with n <= 14: within 1e-12 (a product of at most 14 factors in doubles).
  for (int n = 1; n <= 14; ++n) {
    for (int c = 0; c <= n; ++c) {
      for (int k = 1; k <= n; ++k) {
        EXPECT_NEAR(pass_at_k(n, c, k), pass_at_k_brute(n, c, k), 1e-12)
            << "n " << n << " c " << c << " k " << k;
      }
    }
  }
  EXPECT_DOUBLE_EQ(pass_at_k(10, 3, 1), 0.3);  // pass@1 is the fraction correct
  EXPECT_EQ(pass_at_k(10, 0, 5), 0.0);
  EXPECT_EQ(pass_at_k(10, 6, 5), 1.0);  // n - c < k
  // Stable where binomial coefficients overflow doubles: C(2000, 1000) ~ 10^600.
  // 1 - C(1990, 1000)/C(2000, 1000) = 1 - prod_{i=1991}^{2000} (1 - 1000/i), about 1 - 2^-10.
  const double big = pass_at_k(2000, 10, 1000);
  EXPECT_TRUE(std::isfinite(big));
  EXPECT_NEAR(big, 1.0 - std::pow(0.5, 10), 1e-2);
  EXPECT_NE(input_error([] { pass_at_k(5, 2, 6); }).find("k no larger"), std::string::npos);
  EXPECT_NE(input_error([] { pass_at_k(5, 6, 1); }), "");
}

TEST(EvalEvaluators, MeanAtN) {
  EXPECT_DOUBLE_EQ(mean_at_n(std::vector<double>{1, 0, 0.5, 0.5}), 0.5);
  EXPECT_NE(input_error([] { mean_at_n({}); }), "");
}

TEST(EvalEvaluators, SpecErrorsNameTheFieldAndTheKnownNames) {
  const std::string unknown = input_error([] { make("bleu"); });
  EXPECT_NE(unknown.find("test: field 'evaluators[0]': unknown evaluator 'bleu'"),
            std::string::npos)
      << unknown;
  for (const std::string& t : evaluator_type_names()) {
    EXPECT_NE(unknown.find(t), std::string::npos) << t;
  }
  const std::string option = input_error([] { make({{"type", "exact_match"}, {"case", true}}); });
  EXPECT_NE(option.find("field 'evaluators[0].case': unknown option"), std::string::npos) << option;
  EXPECT_NE(option.find("ignore_case"), std::string::npos);
  EXPECT_NE(input_error([] {
              make({{"type", "exact_match"}, {"ignore_case", "yes"}});
            }).find("'evaluators[0].ignore_case': must be true or false"),
            std::string::npos);
  EXPECT_NE(input_error([] {
              make({{"type", "regex"}});
            }).find("'evaluators[0].pattern'"),
            std::string::npos);
  EXPECT_NE(input_error([] {
              make({{"type", "regex"}, {"pattern", "(a"}});
            }).find("not a valid ECMAScript regular expression"),
            std::string::npos);
  EXPECT_NE(input_error([] {
              make({{"type", "regex"}, {"pattern", "(a)"}, {"group", 2}});
            }).find("'evaluators[0].group'"),
            std::string::npos);
  EXPECT_NE(input_error([] {
              make({{"type", "max_duration"}});
            }).find("seconds"),
            std::string::npos);
  EXPECT_NE(input_error([] {
              make({{"type", "max_duration"}, {"seconds", -1}});
            }).find("> 0"),
            std::string::npos);
  EXPECT_NE(input_error([] {
              make({{"name", "x"}});
            }).find("'evaluators[0].type' is missing"),
            std::string::npos);
  EXPECT_NE(input_error([] { make(3); }), "");
  EXPECT_NE(input_error([] {
              make({{"type", "numeric"}, {"value", "abc"}});
            }).find("value"),
            std::string::npos);
}

TEST(EvalEvaluators, SpecRoundTripsWithDefaultsAndName) {
  const auto e = make({{"type", "exact_match"}, {"name", "em_ci"}, {"ignore_case", true}});
  EXPECT_EQ(e->name(), "em_ci");
  EXPECT_EQ(e->type(), "exact_match");
  EXPECT_EQ(
      e->spec().dump(),
      R"({"type":"exact_match","name":"em_ci","ignore_case":true,"ignore_punctuation":false,"strip":true})");
  for (const std::string& t : evaluator_type_names()) {
    Json spec = t;
    if (t == "regex" || t == "regex_label") spec = {{"type", t}, {"pattern", "(x)"}};
    if (t == "max_duration") spec = {{"type", t}, {"seconds", 1}};
    const auto a = make(spec);
    const auto b = make(a->spec());
    EXPECT_EQ(a->spec(), b->spec()) << t;
    EXPECT_EQ(a->name(), t);
    EXPECT_FALSE(evaluator_case_kinds(t).empty());
  }
}

}  // namespace
}  // namespace nanogpt
