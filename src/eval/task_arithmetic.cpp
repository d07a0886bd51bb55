#include "eval/task_arithmetic.hpp"

#include <algorithm>
#include <string>

namespace nanogpt {

namespace {

constexpr int kLevels = 9;

int64_t power_of_ten(int n) {
  int64_t p = 1;
  for (int i = 0; i < n; ++i) p *= 10;
  return p;
}

class ArithmeticTask final : public TaskFamily {
 public:
  ArithmeticTask(std::string_view name, char op) : name_(name), op_(op) {}

  std::string_view name() const override { return name_; }
  int levels() const override { return kLevels; }
  std::string level_description(int level) const override {
    return "two " + std::to_string(level) + "-digit operands";
  }

  TaskInstance draw(int level, Rng& rng) const override {
    const int64_t lo = level == 1 ? 0 : power_of_ten(level - 1);
    const int64_t hi = power_of_ten(level) - 1;
    const int64_t a = uniform_int(rng, lo, hi);
    const int64_t b = uniform_int(rng, lo, hi);
    return make(a, b);
  }

  std::optional<TaskInstance> parse(std::string_view data) const override {
    const std::vector<std::string_view> parts = split_on(data, op_);
    if (parts.size() != 2) return std::nullopt;
    const std::optional<int64_t> a = parse_plain_integer(parts[0]);
    const std::optional<int64_t> b = parse_plain_integer(parts[1]);
    const int64_t limit = power_of_ten(kLevels);
    if (!a || !b || *a < 0 || *b < 0 || *a >= limit || *b >= limit) return std::nullopt;
    return make(*a, *b);
  }

  bool fits_level(const TaskInstance& t, int level) const override {
    const int64_t lo = level == 1 ? 0 : power_of_ten(level - 1);
    const int64_t hi = power_of_ten(level) - 1;
    return std::all_of(t.numbers.begin(), t.numbers.end(),
                       [&](int64_t v) { return v >= lo && v <= hi; });
  }

  Reward check(const TaskInstance& instance, std::string_view answer) const override {
    const std::optional<int64_t> got = parse_integer_answer(answer);
    if (!got) {
      return {0.0, "the answer '" + std::string(answer) + "' is not an integer"};
    }
    if (*got != instance.target) {
      return {0.0, "expected " + std::to_string(instance.target) + ", got " + std::to_string(*got)};
    }
    return {1.0, "correct: " + std::to_string(*got)};
  }

 private:
  TaskInstance make(int64_t a, int64_t b) const {
    TaskInstance t;
    t.numbers = {a, b};
    t.target = op_ == '+' ? a + b : a * b;
    t.canonical = std::string(name_) + ":" + std::to_string(a) + op_ + std::to_string(b);
    t.question = "What is " + std::to_string(a) + " " + op_ + " " + std::to_string(b) + "?";
    t.answer = std::to_string(t.target);
    return t;
  }

  std::string_view name_;
  char op_;
};

}  // namespace

std::unique_ptr<TaskFamily> make_addition_task() {
  return std::make_unique<ArithmeticTask>("addition", '+');
}

std::unique_ptr<TaskFamily> make_multiplication_task() {
  return std::make_unique<ArithmeticTask>("multiplication", '*');
}

}  // namespace nanogpt
