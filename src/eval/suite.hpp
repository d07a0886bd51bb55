// Evaluation suites as JSON files (issue 17, item 1; docs/eval_suite.schema.json is the
// published schema, tests/test_eval_suite.cpp checks the two agree):
//
//   {"name": "addition-l2", "description": "...", "tokenizer": "...",
//    "generation": {"stop": ["\n"], "max_tokens": 16, "samples": 1},   // generate defaults
//    "evaluators": ["exact_match", {"type": "max_duration", "seconds": 5}],
//    "cases": [
//      {"name": "add-0", "kind": "generate", "inputs": {"prompt": "Question: ...\nAnswer:"},
//       "expected": "42", "task": {"instance": "addition:17+25", "level": 2, "split": "test"},
//       "metadata": {...}, "evaluators": ["verifier"]},
//      {"name": "c-0", "kind": "choice", "inputs": {"context": "...", "choices": [" a", " b"]},
//       "expected": 1},
//      {"name": "t-0", "kind": "text", "inputs": {"text": "..."}}]}
//
// Suite-level evaluators apply to every case of a kind they accept (each must accept at least
// one case in the suite); case-level ones must accept their case. Loading checks everything —
// types, unknown fields, unique case names, >= 2 non-empty choices and a gold index in range,
// stop strings or max_tokens for every generate case, samples >= 1, a task instance as the
// generator writes it (and in the split it claims), evaluators that can evaluate their cases,
// at least one evaluator per case — and every error is an InputError naming the file, the case
// (index and name) and the field.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "eval/evaluators.hpp"
#include "eval/suite_case.hpp"

namespace nanogpt {

struct Suite {
  std::string path;  // the file it was read from; names it in errors ("" if built in memory)
  std::string name;
  std::string description;
  // Optional: the tokenizer the suite was written for (a tokenizer file or a name); a runner
  // compares it with the checkpoint's.
  std::string tokenizer;
  std::optional<GenerationSettings> generation;  // defaults for generate cases
  std::vector<std::shared_ptr<const Evaluator>> evaluators;
  std::vector<SuiteCase> cases;

  // The suite's evaluators that accept the case's kind, then the case's own.
  std::vector<const Evaluator*> evaluators_for(const SuiteCase& c) const;
};

// The fields the loader knows, top level and per case (the schema's "properties").
std::vector<std::string> suite_field_names();
std::vector<std::string> suite_case_field_names();

Suite parse_suite(std::string_view text, const std::string& path);
Suite load_suite(const std::string& path);

// Checks a suite built in memory as the loader checks a file (parse_suite calls it too).
void validate_suite(const Suite& suite);

// The suite as JSON (two-space indent, the loader's field order). Cases are written with their
// resolved generation settings; loading the text gives the same suite, and writing that again
// the same bytes.
std::string suite_json(const Suite& suite);
// Validates, then writes atomically.
void save_suite(const Suite& suite, const std::string& path);

}  // namespace nanogpt
