#include "eval/task_suite.hpp"

#include <unordered_set>

#include "eval/evaluators.hpp"
#include "eval/task_registry.hpp"
#include "runtime/error.hpp"

namespace nanogpt {

Suite make_task_suite(const TaskSuiteOptions& o) {
  const TaskFamily& family = task_family(o.family);
  if (o.level < 1 || o.level > family.levels()) {
    throw InputError("task '" + o.family + "' has levels 1.." + std::to_string(family.levels()) +
                     ", not " + std::to_string(o.level));
  }
  if (o.cases < 1) throw InputError("a suite needs at least 1 case");
  if (o.shots < 0) throw InputError("--shots must be >= 0");
  if (o.samples < 1) throw InputError("--samples must be >= 1");
  if (o.max_tokens < 1) throw InputError("--max-tokens must be >= 1");
  const std::string split(task_split_name(o.split));
  Suite s;
  s.name = o.family + "-l" + std::to_string(o.level) + "-" + split;
  s.description = o.family + " at level " + std::to_string(o.level) + " (" +
                  family.level_description(o.level) + "), " + split + " split, seed " +
                  std::to_string(o.seed) + ", " + std::to_string(o.shots) +
                  "-shot prompts from the train split";
  s.generation =
      GenerationSettings{task_stop_strings(), o.max_tokens, o.samples, o.temperature, o.top_k};
  s.evaluators.push_back(make_evaluator("verifier", "", "evaluators[0]"));
  std::unordered_set<std::string> seen;
  // Misses are repeats; a level whose split holds fewer problems than asked runs out.
  const uint64_t max_index = static_cast<uint64_t>(o.cases) * 100 + 10000;
  for (uint64_t index = 0; static_cast<int64_t>(s.cases.size()) < o.cases; ++index) {
    if (index >= max_index) {
      if (o.allow_fewer && !s.cases.empty()) break;
      throw InputError("task '" + o.family + "' level " + std::to_string(o.level) + " gave only " +
                       std::to_string(s.cases.size()) + " distinct " + split + " problems in " +
                       std::to_string(max_index) + " draws; ask for fewer cases or a higher level");
    }
    const TaskInstance t = generate_task(o.family, o.level, o.split, o.seed, index);
    if (!seen.insert(t.canonical).second) continue;
    SuiteCase c;
    c.name = o.family + "-l" + std::to_string(o.level) + "-" + std::to_string(s.cases.size());
    c.kind = CaseKind::kGenerate;
    c.prompt = few_shot_prompt(t, o.shots, o.seed);
    c.expected = t.answer;
    c.generation = *s.generation;
    c.metadata = {{"family", t.family},
                  {"level", t.level},
                  {"split", split},
                  {"seed", o.seed},
                  {"index", index}};
    c.task = t;
    s.cases.push_back(std::move(c));
  }
  validate_suite(s);
  return s;
}

}  // namespace nanogpt
