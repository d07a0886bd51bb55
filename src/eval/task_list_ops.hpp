// Sorting a list ascending and reversing it. Levels 1..5: lists of 3 values in 0..9, 5 in
// 0..99, 8 in 0..99, 12 in 0..999, 20 in 0..999 (duplicates allowed). Question "Sort these
// numbers in ascending order: 5, 3, 9", answer "3, 5, 9"; the verifier accepts the values
// separated by commas and/or spaces, optionally in [] or ().
#pragma once

#include <memory>

#include "eval/task_family.hpp"

namespace nanogpt {

std::unique_ptr<TaskFamily> make_sort_task();
std::unique_ptr<TaskFamily> make_reverse_task();

}  // namespace nanogpt
