// One problem of a verifiable task (issue 17, item 3): what a generator draws, what a prompt
// shows and what a verifier checks an answer against. The post-training issue uses the same
// instances and rewards for reinforcement learning, so this stays plain data.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace nanogpt {

enum class TaskSplit { kTrain, kTest };

std::string_view task_split_name(TaskSplit split);
// "train" or "test"; anything else is an InputError naming both.
TaskSplit parse_task_split(std::string_view name);

// A verifier's verdict: a reward in [0, 1] and why (for logs and reports).
struct Reward {
  double value = 0;
  std::string reason;
};

struct TaskInstance {
  std::string family;  // "addition", "countdown", ... (task_registry.hpp lists them)
  int level = 1;       // difficulty, 1..the family's level count
  TaskSplit split = TaskSplit::kTrain;
  // The problem as text: the family name, a colon and the problem's data ("addition:17+25",
  // "countdown:1,3,7,10,25,50=175"). Its hash alone decides the split, so a problem is in one split
  // whatever level, seed or index drew it; task_from_canonical rebuilds the instance from it.
  std::string canonical;
  std::string question;  // the problem in words: "What is 17 + 25?"
  std::string prompt;    // zero-shot prompt: "Question: <question>\nAnswer:"
  std::string answer;    // a correct answer in the format the verifier reads ("42", "3, 5, 9")
  // The problem's data, as the family uses it: operands, the list, Countdown's numbers
  // (ascending); Countdown's target; the word and letter of letter_count.
  std::vector<int64_t> numbers;
  int64_t target = 0;
  std::string word;
  std::string letter;
};

}  // namespace nanogpt
