#include "posttrain/task_conversations.hpp"

#include <algorithm>

#include "eval/task_family.hpp"
#include "eval/task_registry.hpp"
#include "runtime/error.hpp"

namespace nanogpt {

namespace {

int parse_level(std::string_view text, const TaskFamily& family, std::string_view part) {
  const std::optional<int64_t> v = parse_plain_integer(text);
  if (!v || *v < 1 || *v > family.levels()) {
    throw InputError("task mixture: '" + std::string(part) + "': level '" + std::string(text) +
                     "' is not one of " + std::string(family.name()) + "'s levels 1.." +
                     std::to_string(family.levels()));
  }
  return static_cast<int>(*v);
}

}  // namespace

std::vector<TaskCell> parse_task_mixture(std::string_view spec) {
  std::vector<TaskCell> cells;
  for (std::string_view raw : split_on(spec, ',')) {
    const std::string_view part = trim(raw);
    if (part.empty()) continue;
    const size_t colon = part.find(':');
    const std::string_view name = trim(part.substr(0, colon));
    const TaskFamily& family = task_family(name);  // InputError listing the families
    int lo = 1, hi = family.levels();
    if (colon != std::string_view::npos) {
      const std::string_view levels = trim(part.substr(colon + 1));
      const size_t dash = levels.find('-');
      if (dash == std::string_view::npos) {
        lo = hi = parse_level(levels, family, part);
      } else {
        lo = parse_level(trim(levels.substr(0, dash)), family, part);
        hi = parse_level(trim(levels.substr(dash + 1)), family, part);
        if (lo > hi) {
          throw InputError("task mixture: '" + std::string(part) +
                           "': the range's first level is above its last");
        }
      }
    }
    for (int level = lo; level <= hi; ++level) {
      TaskCell cell{std::string(family.name()), level};
      if (std::find(cells.begin(), cells.end(), cell) != cells.end()) {
        throw InputError("task mixture: " + cell.family + " level " + std::to_string(level) +
                         " is named twice");
      }
      cells.push_back(cell);
    }
  }
  if (cells.empty()) {
    throw InputError("task mixture '" + std::string(spec) +
                     "' names no task: write FAMILY[:LEVEL[-LEVEL]],... (e.g. addition:1-2,sort)");
  }
  return cells;
}

std::string task_mixture_string(const std::vector<TaskCell>& cells) {
  std::string out;
  for (const TaskCell& c : cells) {
    if (!out.empty()) out += ',';
    out += c.family + ":" + std::to_string(c.level);
  }
  return out;
}

std::vector<TaskInstance> mixture_problems(const std::vector<TaskCell>& cells, TaskSplit split,
                                           uint64_t seed, int64_t per_cell) {
  std::vector<TaskInstance> out;
  out.reserve(cells.size() * static_cast<size_t>(std::max<int64_t>(per_cell, 0)));
  for (int64_t i = 0; i < per_cell; ++i) {
    for (const TaskCell& c : cells) {
      out.push_back(generate_task(c.family, c.level, split, seed, static_cast<uint64_t>(i)));
    }
  }
  return out;
}

Conversation task_prompt_conversation(const TaskInstance& problem) {
  return Conversation{{ChatMessage{ChatRole::kUser, problem.question}}};
}

Conversation task_conversation(const TaskInstance& problem) {
  Conversation c = task_prompt_conversation(problem);
  c.messages.push_back(ChatMessage{ChatRole::kAssistant, problem.answer});
  return c;
}

}  // namespace nanogpt
