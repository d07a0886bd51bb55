// The task registry (issue 17, item 3): every task family by name, seeded generation with the
// train/test split decided by construction, few-shot prompts and verification of a model's
// completion. The post-training issue uses generate_task and verify as its reward.
//
// Families and levels (each family's header says what a level means):
//   addition (1..9), multiplication (1..9), countdown (1..4), sort (1..5), reverse (1..5),
//   letter_count (1..4).
//
// Everything here is a pure function of its arguments (the registry is built once, then only
// read), so generators and verifiers may run on many threads at once.
//
// Splits: a problem is in the test split iff the 64-bit FNV-1a hash of its canonical text,
// finalised by SplitMix64, is 0 mod 4 (a quarter of all problems), so train and test are
// disjoint whatever the level, seed or index. generate_task draws problems until one falls in
// the asked split.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "eval/task_family.hpp"
#include "eval/task_instance.hpp"

namespace nanogpt {

// The one-line marker the prompts end with and the verifier reads an answer after.
inline constexpr std::string_view kAnswerCue = "Answer:";

// Family names in registry order.
std::vector<std::string> task_family_names();
// The family called `name`; an InputError listing the known ones otherwise.
const TaskFamily& task_family(std::string_view name);

// The split a problem belongs to, from its canonical text alone.
TaskSplit task_split_of(std::string_view canonical);

// Instance `index` of (family, level, split, seed): the same arguments give the same instance
// on every platform. A level outside the family's range is an InputError naming the range.
TaskInstance generate_task(std::string_view family, int level, TaskSplit split, uint64_t seed,
                           uint64_t index);

// Rebuilds an instance from its canonical text (as stored in a suite) at `level`, which the
// problem must fit (an addition of 2-digit operands is level 2). The split comes from the
// hash. An InputError names the text and what is wrong.
TaskInstance task_from_canonical(std::string_view canonical, int level);

// "Question: <question>\nAnswer:" — what a model completes.
std::string zero_shot_prompt(const TaskInstance& instance);
// k solved examples from the train split at the instance's family and level, then the
// instance's own zero-shot prompt; examples are separated by a blank line:
//   Question: What is 3 + 4?\nAnswer: 7\n\nQuestion: What is 17 + 25?\nAnswer:
// The examples are instances of a stream seeded by (seed, the instance's canonical text), never
// the instance itself, and deterministic.
std::string few_shot_prompt(const TaskInstance& instance, int k, uint64_t seed);
// What generation should stop at after a task prompt: the end of the answer's line.
std::vector<std::string> task_stop_strings();

// The answer part of a completion: cut at "\nQuestion:" (a model continuing the few-shot
// pattern), then the rest of the line after the last "Answer:" if there is one, else the first
// non-blank line; trimmed. "  42\n\nQuestion: ..." and "So 40 + 2.\nAnswer: 42" both give "42".
std::string extract_answer(std::string_view completion);

// The reward for a completion: the family's check of extract_answer(completion).
Reward verify(const TaskInstance& instance, std::string_view completion);

}  // namespace nanogpt
