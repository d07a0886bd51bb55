// Rubrics as rewards (issue 18, item 3; "Rubrics as Rewards", RaR, arXiv 2507.17746): a rubric
// is a list of criteria, each with a weight class and one check of a response; the reward is the
// explicit weighted aggregate of the checks (rubric_score.hpp), every criterion reported. This
// file holds what a rubric is and its JSON file (docs/rubric.schema.json is the published
// schema; tests/test_rubric.cpp checks the two agree):
//
//   {"name": "fortune-answers", "description": "...",
//    "criteria": [                                    // apply to every prompt
//      {"name": "length", "description": "The answer is 3 to 60 words long.",
//       "class": "essential", "check": {"type": "length", "unit": "words", "min": 3, "max": 60}},
//      {"name": "echo", "description": "The response repeats the question.", "class": "pitfall",
//       "weight": -0.5, "check": {"type": "contains", "values": ["Question:"],
//                                 "include_prompt": true}}],
//    "prompts": [
//      {"name": "computers", "prompt": "Tell me a short fortune about computers.",
//       "criteria": [...]},                           // this prompt's own, besides the rubric's
//      {"name": "add", "prompt": "What is 17 + 25?", "task": "addition:17+25"}]}
//
// Weight classes and their default weights (a criterion's "weight" overrides the default):
//   essential 1.0, important 0.7, optional 0.3 — what a good response does;
//   pitfall -0.9 — a mistake: the criterion describes it and is "satisfied" when the response
//   makes it, which subtracts.
// The magnitudes are RaR's for its explicit aggregation (RaR-Explicit maps Essential, Important,
// Optional and Pitfall to 1.0, 0.7, 0.3 and 0.9). RaR phrases a pitfall positively ("avoids
// X", +0.9 when avoided); we phrase it as the mistake with a negative weight and leave it out of
// the normaliser, as RaR's generated rubrics do ("Pitfall Criteria: Does not mention ...",
// weight -1 or -2) and as HealthBench scores negative criteria: r = Σ_j w_j·c_j / Σ_{w_j>0} w_j,
// clamped into [0, 1]. So a perfect response scores 1 whatever pitfalls the rubric lists, and a
// mistake costs the same whatever else the response does.
//
// Checks (options in brackets; defaults after '='):
//   contains          the response contains one (all) of `values` [values, match=any|all,
//                     ignore_case=false, include_prompt=false: the prompt's text is one more value]
//   regex             `pattern` (ECMAScript) matches in the response, on any line or only on its
//                     last non-blank line [pattern, ignore_case=false, lines=any|last]; each line's
//                     first 2048 bytes are searched (line_regex.hpp)
//   length            the trimmed response is min..max characters (Unicode code points) or words
//                     [unit=words|characters, min, max: at least one]
//   ngram_repetition  the fraction of the response's word n-grams that repeat an earlier one is
//                     at most max_fraction [n, max_fraction]
//   numeric           the response's last number is within `tolerance` of `value` [value,
//                     tolerance=0]
//   verifier          the task registry's verifier on the prompt's task (its "task": a canonical
//                     problem text of that family): satisfied when the reward reaches min_reward,
//                     scored by the reward [task: the family, min_reward=1]
//   judge             a judge (rubric_judge.hpp) asked whether the response satisfies the
//                     criterion's description; scored by its probability of "Yes", satisfied
//                     when that is at least 0.5 []
// Words: runs between whitespace, trimmed to their first and last letter or number, runs without
// one dropped; n-grams compare them with ASCII letters lower-cased (rubric_check.hpp). Every
// check but the verifier and the judge scores 0 or 1.
//
// Loading checks everything (types, unknown keys, names unique among the criteria a prompt gets,
// unique prompt names, the sign of a weight against its class, options of each check, regexes
// compiled, task texts parsed, a verifier's prompts having a task of its family, a criterion
// name used by several prompts having one class and weight — rates are kept per name — and at
// least one positive weight among each prompt's criteria) and names the file and the JSON path
// of the field in every error. Whether a judge is needed is known at load (rubric_uses_judge);
// scoring a judge criterion without one is an InputError (rubric_score.hpp).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <regex>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "eval/task_instance.hpp"

namespace nanogpt {

enum class WeightClass { kEssential, kImportant, kOptional, kPitfall };

std::string_view weight_class_name(WeightClass c);  // "essential", ...
std::vector<WeightClass> all_weight_classes();
// 1.0, 0.7, 0.3, -0.9 (above).
double default_weight(WeightClass c);

struct ContainsCheck {
  std::vector<std::string> values;
  bool match_all = false;
  bool ignore_case = false;     // ASCII letters
  bool include_prompt = false;  // the prompt's text is one more value
};

struct RegexCheck {
  std::string pattern;
  bool ignore_case = false;
  bool last_line = false;                      // only the last non-blank line
  std::shared_ptr<const std::regex> compiled;  // made by regex_check (the loader calls it)
};

enum class LengthUnit { kWords, kCharacters };

struct LengthCheck {
  LengthUnit unit = LengthUnit::kWords;
  std::optional<int64_t> min, max;
};

struct NgramRepetitionCheck {
  int64_t n = 3;
  double max_fraction = 0;
};

struct NumericCheck {
  double value = 0;
  double tolerance = 0;
};

struct VerifierCheck {
  std::string task;  // the family
  double min_reward = 1;
};

struct JudgeCheck {};

using RubricCheck = std::variant<ContainsCheck, RegexCheck, LengthCheck, NgramRepetitionCheck,
                                 NumericCheck, VerifierCheck, JudgeCheck>;

// "contains", "regex", ... in the variant's order.
std::vector<std::string> rubric_check_type_names();
std::string_view rubric_check_type(const RubricCheck& check);
// The options a check type's JSON may give besides "type" (empty for an unknown type).
std::vector<std::string> rubric_check_option_names(std::string_view type);

// A regex check with its pattern compiled; an invalid pattern is an InputError naming it.
RegexCheck regex_check(std::string pattern, bool ignore_case = false, bool last_line = false);

struct Criterion {
  std::string name;         // unique among the criteria a prompt gets; rates are kept per name
  std::string description;  // what it asks of a response (what a judge is asked)
  WeightClass weight_class = WeightClass::kEssential;
  std::optional<double> explicit_weight;  // overrides the class's default
  RubricCheck check;

  double weight() const { return explicit_weight.value_or(default_weight(weight_class)); }
};

// One prompt a policy answers, with the criteria that apply to it besides the rubric's.
struct RubricItem {
  std::string name;
  std::string prompt;
  std::optional<TaskInstance> task;  // what a verifier check verifies against
  std::vector<Criterion> criteria;
};

struct Rubric {
  std::string path;  // the file it was read from; names it in errors ("" if built in memory)
  std::string name;
  std::string description;
  std::vector<Criterion> criteria;  // apply to every prompt
  std::vector<RubricItem> prompts;

  // The rubric's criteria, then the item's own.
  std::vector<const Criterion*> criteria_for(const RubricItem& item) const;
  // The prompt called `name`, or nullptr.
  const RubricItem* find_prompt(std::string_view name) const;
};

// The keys the loader knows (the schema's "properties"): top level, per prompt, per criterion.
std::vector<std::string> rubric_field_names();
std::vector<std::string> rubric_prompt_field_names();
std::vector<std::string> rubric_criterion_field_names();

Rubric parse_rubric(std::string_view text, const std::string& path);
Rubric load_rubric(const std::string& path);
// Checks a rubric built in memory as the loader checks a file (parse_rubric calls it too).
void validate_rubric(const Rubric& rubric);

// Whether any criterion is a judge check (scoring it then needs a RubricJudge).
bool rubric_uses_judge(const Rubric& rubric);

}  // namespace nanogpt
