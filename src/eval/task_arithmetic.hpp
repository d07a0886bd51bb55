// Multi-digit addition and multiplication. Level L (1..9): two operands of exactly L digits
// (level 1: 0..9), so every result fits in int64. Question "What is 17 + 25?", answer "42";
// the verifier accepts "42", "+42", "42.", "42.0" and "4,200"-style grouping.
#pragma once

#include <memory>

#include "eval/task_family.hpp"

namespace nanogpt {

std::unique_ptr<TaskFamily> make_addition_task();
std::unique_ptr<TaskFamily> make_multiplication_task();

}  // namespace nanogpt
