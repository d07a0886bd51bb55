// Evaluators (issue 17, item 2): each looks at what a model produced for one case (one sample)
// and returns an outcome — an assertion (pass/fail), a score or a label — with a reason, as
// Pydantic Evals' evaluators do.
//
// Types, by the case kinds they accept (spec options in brackets; defaults after '='):
//   generate:
//     exact_match   the output equals the expected text [value | values, ignore_case=false,
//                   ignore_punctuation=false, strip=true]
//     contains      the output contains the expected text (any of `values`) [value | values,
//                   ignore_case=false]
//     regex         the first (or last) match of `pattern` in the output, group `group`
//                   (default 1 if the pattern has groups, else 0), equals the expected text
//                   under exact_match's options [pattern, group, select=first|last, value,
//                   ignore_case, ignore_punctuation, strip]
//     numeric       the first (or last) number in the output, or the group of `pattern`, is
//                   within max(abs_tol, rel_tol·|expected|) of the expected number [value,
//                   abs_tol=0, rel_tol=0, pattern, group, select=first|last]
//     verifier      the task registry's verifier on the case's task: an assertion passing when
//                   the reward reaches min_reward, its value the reward [task, min_reward=1]
//     regex_label   a label: the matched group of `pattern`, or "none" [pattern, group,
//                   select=first|last]
//   choice:  acc, acc_norm, acc_bytes — assertions: the picked choice is the gold one
//            (evaluator_metrics.hpp)
//   text:    loss, perplexity, bits_per_byte — scores, lower is better
//   any:     max_duration  the case took at most `seconds` [seconds]
// The regex-based ones match within a line (the first 2048 bytes of each): libstdc++'s
// std::regex recurses per character and would overflow the stack on very long inputs.
// Evaluators are immutable after make_evaluator: one may evaluate on many threads at once.
// Every spec may also give a "name" (default: the type), which its outcomes carry; a case's
// evaluators must have distinct names.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "eval/suite_case.hpp"

namespace nanogpt {

enum class OutcomeKind { kAssertion, kScore, kLabel };

std::string_view outcome_kind_name(OutcomeKind kind);

struct EvaluatorOutcome {
  std::string evaluator;  // the evaluator's name
  OutcomeKind kind = OutcomeKind::kAssertion;
  bool passed = false;  // assertions
  // Assertions: 1 or 0 (a verifier's: the reward). Scores: the score (in [0, 1] except the
  // text metrics, which are unbounded). Labels: 0.
  double value = 0;
  bool higher_is_better = true;
  std::string label;  // labels
  std::string reason;
};

// What the model produced on one case, one sample.
struct Observation {
  std::string output;           // generate: the completion (after the prompt, stop excluded)
  double duration_seconds = 0;  // time spent on this case or sample
  // choice: each choice's log-likelihood given the context, summed over its tokens (nats)
  std::vector<double> choice_logprobs;
  // text: the document's summed log-likelihood over tokens that cover every byte of the case's
  // text (bits per byte divides by its bytes), and the number of those tokens
  double text_logprob = 0;
  int64_t text_tokens = 0;
};

// Why a case cannot be evaluated: the case's field at fault and what is wrong.
struct CaseProblem {
  std::string field;
  std::string message;
};

class Evaluator {
 public:
  virtual ~Evaluator() = default;
  virtual std::string_view type() const = 0;
  const std::string& name() const { return name_; }
  virtual bool accepts(CaseKind kind) const = 0;
  // A problem that makes `c` impossible to evaluate (no expected output, no task), if any.
  virtual std::optional<CaseProblem> check_case(const SuiteCase& c) const;
  virtual EvaluatorOutcome evaluate(const SuiteCase& c, const Observation& o) const = 0;
  // The spec with every option and its value (defaults filled in): make_evaluator of it gives
  // an equal evaluator.
  const nlohmann::ordered_json& spec() const { return spec_; }

 protected:
  std::string name_;
  nlohmann::ordered_json spec_;

 private:
  friend std::shared_ptr<const Evaluator> make_evaluator(const nlohmann::ordered_json& spec,
                                                         const std::string& where,
                                                         const std::string& field);
};

// Every evaluator type, in the order of the table above.
std::vector<std::string> evaluator_type_names();
// The case kinds an evaluator type accepts (empty for an unknown type).
std::vector<CaseKind> evaluator_case_kinds(std::string_view type);
// The options a type's spec may give besides "type" and "name" (empty for an unknown type).
std::vector<std::string> evaluator_option_names(std::string_view type);

// Builds an evaluator from its spec: a type name ("acc") or an object {"type": ..., options}.
// An unknown type, an unknown or mistyped option, or a bad value is an InputError
// "<where>field '<field>.<option>': <what>", listing the known types or options.
std::shared_ptr<const Evaluator> make_evaluator(const nlohmann::ordered_json& spec,
                                                const std::string& where, const std::string& field);

}  // namespace nanogpt
