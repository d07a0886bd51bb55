// The interface every task family implements (task_arithmetic.*, task_countdown.*,
// task_list_ops.*, task_letter_count.*), and the text helpers they share. Users go through
// task_registry.hpp; a new family is one file implementing TaskFamily plus one line in the
// registry's table.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "eval/task_instance.hpp"
#include "runtime/random.hpp"

namespace nanogpt {

class TaskFamily {
 public:
  virtual ~TaskFamily() = default;
  virtual std::string_view name() const = 0;
  // Levels are 1..levels().
  virtual int levels() const = 0;
  // What a level means ("two 3-digit operands").
  virtual std::string level_description(int level) const = 0;
  // Draws a problem at `level` from `rng`: fills everything but family, level, split and prompt
  // (the registry sets those). Any split; the registry rejection-samples into the one asked.
  virtual TaskInstance draw(int level, Rng& rng) const = 0;
  // Rebuilds the problem from the data part of its canonical text (after "family:"); nullopt
  // when the text is not one this family writes.
  virtual std::optional<TaskInstance> parse(std::string_view data) const = 0;
  // Whether a problem is one `draw(level)` can give (task_from_canonical checks a suite's claim).
  virtual bool fits_level(const TaskInstance& instance, int level) const = 0;
  // Checks an extracted answer (one line, trimmed; task_registry.hpp's extract_answer).
  virtual Reward check(const TaskInstance& instance, std::string_view answer) const = 0;
};

// Shared text helpers.
std::string_view trim(std::string_view s);
std::string join_numbers(const std::vector<int64_t>& v, std::string_view separator);
// A decimal integer: optional sign, digits, optionally grouped by commas in threes ("1,234"),
// optionally followed by ".0..." or a final '.'; nullopt otherwise or beyond int64.
std::optional<int64_t> parse_integer_answer(std::string_view text);
// A list of integers separated by commas and/or spaces, optionally inside [] or (); nullopt if
// anything else appears.
std::optional<std::vector<int64_t>> parse_integer_list(std::string_view text);
// Uniform integer in [lo, hi].
int64_t uniform_int(Rng& rng, int64_t lo, int64_t hi);
// Strict parse of a plain decimal integer (digits with an optional '-'), for canonical texts.
std::optional<int64_t> parse_plain_integer(std::string_view text);
// Splits on a separator character.
std::vector<std::string_view> split_on(std::string_view s, char separator);

}  // namespace nanogpt
