#include "eval/task_list_ops.hpp"

#include <algorithm>
#include <string>

namespace nanogpt {

namespace {

struct ListLevel {
  int length;
  int64_t max_value;
};
constexpr ListLevel kListLevels[] = {{3, 9}, {5, 99}, {8, 99}, {12, 999}, {20, 999}};
constexpr int kLevels = static_cast<int>(std::size(kListLevels));
constexpr size_t kMaxParsedLength = 1000;

class ListTask final : public TaskFamily {
 public:
  ListTask(std::string_view name, bool sort) : name_(name), sort_(sort) {}

  std::string_view name() const override { return name_; }
  int levels() const override { return kLevels; }
  std::string level_description(int level) const override {
    const ListLevel& l = kListLevels[level - 1];
    return std::to_string(l.length) + " values in 0.." + std::to_string(l.max_value);
  }

  TaskInstance draw(int level, Rng& rng) const override {
    const ListLevel& l = kListLevels[level - 1];
    std::vector<int64_t> values(static_cast<size_t>(l.length));
    for (int64_t& v : values) v = uniform_int(rng, 0, l.max_value);
    return make(std::move(values));
  }

  std::optional<TaskInstance> parse(std::string_view data) const override {
    std::vector<int64_t> values;
    for (std::string_view part : split_on(data, ',')) {
      const std::optional<int64_t> v = parse_plain_integer(part);
      if (!v) return std::nullopt;
      values.push_back(*v);
    }
    if (values.empty() || values.size() > kMaxParsedLength) return std::nullopt;
    return make(std::move(values));
  }

  bool fits_level(const TaskInstance& t, int level) const override {
    const ListLevel& l = kListLevels[level - 1];
    return t.numbers.size() == static_cast<size_t>(l.length) &&
           std::all_of(t.numbers.begin(), t.numbers.end(),
                       [&](int64_t v) { return v >= 0 && v <= l.max_value; });
  }

  Reward check(const TaskInstance& instance, std::string_view answer) const override {
    const std::optional<std::vector<int64_t>> got = parse_integer_list(answer);
    if (!got) {
      return {0.0, "the answer '" + std::string(answer) +
                       "' is not a list of integers (separate them by commas or spaces)"};
    }
    std::vector<int64_t> expected = expected_list(instance.numbers);
    if (got->size() != expected.size()) {
      return {0.0, "expected " + std::to_string(expected.size()) + " values, got " +
                       std::to_string(got->size())};
    }
    for (size_t i = 0; i < expected.size(); ++i) {
      if ((*got)[i] != expected[i]) {
        return {0.0, "value " + std::to_string(i + 1) + " is " + std::to_string((*got)[i]) +
                         ", expected " + std::to_string(expected[i])};
      }
    }
    return {1.0, "correct: " + std::to_string(expected.size()) + " values in order"};
  }

 private:
  std::vector<int64_t> expected_list(std::vector<int64_t> v) const {
    if (sort_) {
      std::sort(v.begin(), v.end());
    } else {
      std::reverse(v.begin(), v.end());
    }
    return v;
  }

  TaskInstance make(std::vector<int64_t> values) const {
    TaskInstance t;
    t.canonical = std::string(name_) + ":" + join_numbers(values, ",");
    t.question =
        std::string(sort_ ? "Sort these numbers in ascending order: " : "Reverse this list: ") +
        join_numbers(values, ", ");
    t.answer = join_numbers(expected_list(values), ", ");
    t.numbers = std::move(values);
    return t;
  }

  std::string_view name_;
  bool sort_;
};

}  // namespace

std::unique_ptr<TaskFamily> make_sort_task() {
  return std::make_unique<ListTask>("sort", true);
}

std::unique_ptr<TaskFamily> make_reverse_task() {
  return std::make_unique<ListTask>("reverse", false);
}

}  // namespace nanogpt
