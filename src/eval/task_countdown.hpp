// A Countdown-style puzzle: reach a target from given numbers with + - * / and parentheses,
// each number used at most once. Levels 1..4: 3 numbers in 1..10 with a target in 10..100;
// 4 in 1..10, target 10..200; 4 in 1..10 and one of 25/50/75/100, target 100..500; 4 small
// and two large, target 100..999 (the TV show's). Every instance is solvable: the target is the
// value of a random expression over all the numbers with positive integer intermediates
// (kept as the instance's answer). The target is never one of the numbers.
//
// The verifier parses the answer as an expression (integers, + - * / × ÷, parentheses; an
// optional "= N" at the end must name the target), evaluates it exactly over the rationals,
// and checks that each literal is one of the numbers, each used at most once. Intermediates
// may be fractions: (a / b) * c is accepted when its exact value is the target.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "eval/task_family.hpp"

namespace nanogpt {

std::unique_ptr<TaskFamily> make_countdown_task();

// An exact fraction (den > 0, lowest terms).
struct Fraction {
  int64_t num = 0;
  int64_t den = 1;
};

struct CountdownExpression {
  std::optional<Fraction> value;  // nullopt: the text is not a valid expression
  std::vector<int64_t> literals;  // the numbers it uses, in order of appearance
  std::string error;              // why it is not valid
};

// Parses and evaluates an arithmetic expression exactly (+ - * / × ÷ x and parentheses over
// non-negative integer literals; no unary minus). Division by zero, overflow of int64, more
// than 64 levels of nesting or 1000 characters are errors.
CountdownExpression evaluate_countdown_expression(std::string_view text);

}  // namespace nanogpt
