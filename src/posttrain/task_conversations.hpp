// The task registry's problems as chat conversations (issue 18, item 2): a mixture of task
// families and levels, its train problems as SFT conversations with their answers, and its test
// problems as prompts for evaluation and RL. The problems, their split and their verifiers are
// the evaluation layer's (eval/task_registry.hpp), so what post-training learns is measured
// by the same checks `nanogpt evals` runs.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "data/chat_format.hpp"
#include "eval/task_instance.hpp"

namespace nanogpt {

// One cell of a mixture: a family at one level.
struct TaskCell {
  std::string family;
  int level = 1;
  bool operator==(const TaskCell&) const = default;
};

// "addition:1-3,sort:2,countdown": families by name, each with a level, a range of levels or
// (none given) all its levels; cells in the order written, duplicates refused. An InputError
// names the part that is wrong (unknown family, level outside its range, empty mixture).
std::vector<TaskCell> parse_task_mixture(std::string_view spec);
// "addition:1,addition:2,sort:2": the cells written back one by one.
std::string task_mixture_string(const std::vector<TaskCell>& cells);

// `per_cell` problems of each cell from `split`, cells interleaved (problem i of every cell,
// then i + 1, ...), drawn by (family, level, split, seed, index): the same arguments give the
// same problems, and train and test never share one (the registry's split is by the problem's
// text).
std::vector<TaskInstance> mixture_problems(const std::vector<TaskCell>& cells, TaskSplit split,
                                           uint64_t seed, int64_t per_cell);

// What a user asks: the problem's question ("What is 17 + 25?").
Conversation task_prompt_conversation(const TaskInstance& problem);
// The question and the answer in the verifier's format ("42"): an SFT example.
Conversation task_conversation(const TaskInstance& problem);

}  // namespace nanogpt
