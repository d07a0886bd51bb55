// One case of an evaluation suite (suite.hpp loads them from JSON): what the model is given and
// what is expected of it, by kind.
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "eval/task_instance.hpp"

namespace nanogpt {

class Evaluator;

enum class CaseKind {
  kText,      // score a document's log-likelihood (loss, perplexity, bits per byte)
  kChoice,    // a context and choices, one of them gold (acc, acc_norm, acc_bytes)
  kGenerate,  // a prompt the model completes, checked by the evaluators
};

std::string_view case_kind_name(CaseKind kind);
// All kinds, in the order of the enum.
std::vector<CaseKind> all_case_kinds();

// How a generate case is sampled (as `nanogpt sample` does). At least one of stop and
// max_tokens bounds each sample; more than one sample needs a temperature above 0 (greedy
// samples would all be the same).
struct GenerationSettings {
  std::vector<std::string> stop;  // generation ends at the first of these (not kept)
  int64_t max_tokens = 0;         // 0: no limit other than the stop strings
  int64_t samples = 1;            // completions per case (pass@k, mean@n)
  double temperature = 0;         // 0: greedy
  int64_t top_k = 0;              // sample among the k most likely tokens; 0: all
};

struct SuiteCase {
  std::string name;  // unique in its suite; reports match cases by it
  CaseKind kind = CaseKind::kGenerate;
  // text
  std::string text;
  // choice: the continuations `choices` of `context`; `gold` indexes the right one
  std::string context;
  std::vector<std::string> choices;
  int64_t gold = 0;
  // generate
  std::string prompt;
  GenerationSettings generation;
  std::optional<std::string> expected;  // the expected output, if the case states one
  std::optional<TaskInstance> task;     // the problem a `verifier` evaluator checks against
  nlohmann::ordered_json metadata = nlohmann::ordered_json::object();
  // Case-level evaluators (the suite's apply too: Suite::evaluators_for).
  std::vector<std::shared_ptr<const Evaluator>> evaluators;
};

}  // namespace nanogpt
