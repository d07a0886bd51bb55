#include "eval/task_countdown.hpp"

#include <algorithm>
#include <numeric>
#include <string>

namespace nanogpt {

namespace {

struct CountdownLevel {
  int small;  // numbers from 1..10
  int large;  // numbers from {25, 50, 75, 100}
  int64_t min_target, max_target;
};
constexpr CountdownLevel kLevels[] = {
    {3, 0, 10, 100}, {4, 0, 10, 200}, {4, 1, 100, 500}, {4, 2, 100, 999}};
constexpr int kLevelCount = static_cast<int>(std::size(kLevels));
constexpr int64_t kLarge[] = {25, 50, 75, 100};
constexpr size_t kMaxExpressionChars = 1000;
constexpr int kMaxDepth = 64;
constexpr size_t kMaxParsedNumbers = 16;

std::optional<Fraction> make_fraction(int64_t num, int64_t den) {
  if (den == 0) return std::nullopt;
  if (den < 0) {
    if (num == INT64_MIN || den == INT64_MIN) return std::nullopt;
    num = -num;
    den = -den;
  }
  const int64_t g = std::gcd(num, den);
  if (g > 1) {
    num /= g;
    den /= g;
  }
  return Fraction{num, den};
}

// a/b op c/d with overflow checks; nullopt on overflow or division by zero.
std::optional<Fraction> combine(Fraction a, char op, Fraction b) {
  int64_t x, y, n, d;
  switch (op) {
    case '+':
    case '-':
      if (__builtin_mul_overflow(a.num, b.den, &x) || __builtin_mul_overflow(b.num, a.den, &y) ||
          __builtin_mul_overflow(a.den, b.den, &d)) {
        return std::nullopt;
      }
      if (op == '+' ? __builtin_add_overflow(x, y, &n) : __builtin_sub_overflow(x, y, &n)) {
        return std::nullopt;
      }
      return make_fraction(n, d);
    case '*':
      if (__builtin_mul_overflow(a.num, b.num, &n) || __builtin_mul_overflow(a.den, b.den, &d)) {
        return std::nullopt;
      }
      return make_fraction(n, d);
    default:  // '/'
      if (b.num == 0) return std::nullopt;
      if (__builtin_mul_overflow(a.num, b.den, &n) || __builtin_mul_overflow(a.den, b.num, &d)) {
        return std::nullopt;
      }
      return make_fraction(n, d);
  }
}

class ExpressionParser {
 public:
  explicit ExpressionParser(std::string_view text) : s_(text) {}

  CountdownExpression run() {
    CountdownExpression out;
    std::optional<Fraction> v = expr(0);
    skip_space();
    if (v && pos_ != s_.size()) {
      std::string what = "unexpected '";
      what += s_.substr(pos_, 1);
      what += "'";
      fail(what);
    }
    if (!error_.empty()) {
      out.error = error_;
      return out;
    }
    out.value = v;
    out.literals = std::move(literals_);
    return out;
  }

 private:
  void fail(const std::string& what) {
    if (error_.empty()) error_ = what + " at character " + std::to_string(pos_ + 1);
  }
  void skip_space() {
    while (pos_ < s_.size() && (s_[pos_] == ' ' || s_[pos_] == '\t')) ++pos_;
  }
  // The operator at pos_ (normalised to + - * /), its length in bytes, or 0.
  char peek_operator(size_t* length) {
    skip_space();
    if (pos_ >= s_.size()) return 0;
    const char c = s_[pos_];
    *length = 1;
    if (c == '+' || c == '-' || c == '*' || c == '/') return c;
    if (c == 'x' || c == 'X') return '*';
    if (s_.substr(pos_, 2) == "\xC3\x97") {  // ×
      *length = 2;
      return '*';
    }
    if (s_.substr(pos_, 2) == "\xC3\xB7") {  // ÷
      *length = 2;
      return '/';
    }
    return 0;
  }

  std::optional<Fraction> expr(int depth) {
    std::optional<Fraction> v = term(depth);
    for (;;) {
      if (!v) return std::nullopt;
      size_t len = 0;
      const char op = peek_operator(&len);
      if (op != '+' && op != '-') return v;
      pos_ += len;
      const std::optional<Fraction> rhs = term(depth);
      if (!rhs) return std::nullopt;
      v = combine(*v, op, *rhs);
      if (!v) fail("a value outside 64-bit range");
    }
  }

  std::optional<Fraction> term(int depth) {
    std::optional<Fraction> v = factor(depth);
    for (;;) {
      if (!v) return std::nullopt;
      size_t len = 0;
      const char op = peek_operator(&len);
      if (op != '*' && op != '/') return v;
      pos_ += len;
      const std::optional<Fraction> rhs = factor(depth);
      if (!rhs) return std::nullopt;
      if (op == '/' && rhs->num == 0) {
        fail("division by zero");
        return std::nullopt;
      }
      v = combine(*v, op, *rhs);
      if (!v) fail("a value outside 64-bit range");
    }
  }

  std::optional<Fraction> factor(int depth) {
    skip_space();
    if (depth >= kMaxDepth) {
      fail("more than " + std::to_string(kMaxDepth) + " nested parentheses");
      return std::nullopt;
    }
    if (pos_ >= s_.size()) {
      fail("the expression ends early");
      return std::nullopt;
    }
    if (s_[pos_] == '(') {
      ++pos_;
      std::optional<Fraction> v = expr(depth + 1);
      if (!v) return std::nullopt;
      skip_space();
      if (pos_ >= s_.size() || s_[pos_] != ')') {
        fail("a missing ')'");
        return std::nullopt;
      }
      ++pos_;
      return v;
    }
    if (s_[pos_] >= '0' && s_[pos_] <= '9') {
      size_t end = pos_;
      while (end < s_.size() && s_[end] >= '0' && s_[end] <= '9') ++end;
      const std::optional<int64_t> n = parse_integer_answer(s_.substr(pos_, end - pos_));
      if (!n) {
        fail("a number outside 64-bit range");
        return std::nullopt;
      }
      pos_ = end;
      literals_.push_back(*n);
      return Fraction{*n, 1};
    }
    if (s_[pos_] == '-') {
      fail("a negative number (unary minus is not allowed)");
    } else {
      // Appended piece by piece: GCC 12's -Wrestrict misfires on "'" + std::string(...) here.
      std::string what = "'";
      what += s_.substr(pos_, 1);
      what += "' where a number was expected";
      fail(what);
    }
    return std::nullopt;
  }

  std::string_view s_;
  size_t pos_ = 0;
  std::vector<int64_t> literals_;
  std::string error_;
};

struct Node {
  int64_t value;
  std::string text;
  bool compound;
};

std::string operand_text(const Node& n) {
  return n.compound ? "(" + n.text + ")" : n.text;
}

// Combines the numbers in random order with random operations, keeping every intermediate a
// positive integer; nullopt if a step found no valid operation (the caller draws again).
std::optional<Node> random_expression(const std::vector<int64_t>& numbers, Rng& rng) {
  std::vector<Node> pool;
  for (int64_t n : numbers) pool.push_back({n, std::to_string(n), false});
  while (pool.size() > 1) {
    const size_t i = rng.next_u64() % pool.size();
    size_t j = rng.next_u64() % (pool.size() - 1);
    if (j >= i) ++j;
    Node a = pool[i], b = pool[j];
    const char ops[] = {'+', '-', '*', '/'};
    const char op = ops[rng.next_u64() % 4];
    if (op == '-' || op == '/') {
      if (a.value < b.value) std::swap(a, b);
      if (op == '-' && a.value == b.value) return std::nullopt;
      if (op == '/' && (b.value <= 1 || a.value % b.value != 0)) return std::nullopt;
    }
    int64_t v = 0;
    switch (op) {
      case '+':
        v = a.value + b.value;
        break;
      case '-':
        v = a.value - b.value;
        break;
      case '*':
        v = a.value * b.value;
        break;
      default:
        v = a.value / b.value;
        break;
    }
    Node c{v, operand_text(a) + " " + op + " " + operand_text(b), true};
    pool.erase(pool.begin() + static_cast<std::ptrdiff_t>(std::max(i, j)));
    pool.erase(pool.begin() + static_cast<std::ptrdiff_t>(std::min(i, j)));
    pool.push_back(std::move(c));
  }
  return pool[0];
}

class CountdownTask final : public TaskFamily {
 public:
  std::string_view name() const override { return "countdown"; }
  int levels() const override { return kLevelCount; }
  std::string level_description(int level) const override {
    const CountdownLevel& l = kLevels[level - 1];
    return std::to_string(l.small) + " numbers in 1..10" +
           (l.large > 0 ? " and " + std::to_string(l.large) + " of 25/50/75/100" : "") +
           ", target " + std::to_string(l.min_target) + ".." + std::to_string(l.max_target);
  }

  TaskInstance draw(int level, Rng& rng) const override {
    const CountdownLevel& l = kLevels[level - 1];
    for (;;) {
      std::vector<int64_t> numbers;
      for (int i = 0; i < l.small; ++i) numbers.push_back(uniform_int(rng, 1, 10));
      for (int i = 0; i < l.large; ++i) numbers.push_back(kLarge[rng.next_u64() % 4]);
      // A few expressions per draw of numbers: some sets reach few targets in range.
      for (int attempt = 0; attempt < 20; ++attempt) {
        const std::optional<Node> e = random_expression(numbers, rng);
        if (!e || e->value < l.min_target || e->value > l.max_target) continue;
        if (std::find(numbers.begin(), numbers.end(), e->value) != numbers.end()) continue;
        return make(numbers, e->value, e->text);
      }
    }
  }

  std::optional<TaskInstance> parse(std::string_view data) const override {
    // "3,7,25,50=175"
    const std::vector<std::string_view> parts = split_on(data, '=');
    if (parts.size() != 2) return std::nullopt;
    std::vector<int64_t> numbers;
    for (std::string_view p : split_on(parts[0], ',')) {
      const std::optional<int64_t> v = parse_plain_integer(p);
      if (!v || *v < 1 || *v > 1000) return std::nullopt;
      numbers.push_back(*v);
    }
    const std::optional<int64_t> target = parse_plain_integer(parts[1]);
    if (numbers.size() < 2 || numbers.size() > kMaxParsedNumbers || !target) return std::nullopt;
    // A parsed problem has no known solution; the reference answer is searched for.
    TaskInstance t = make(numbers, *target, "");
    t.answer = solve(t.numbers, t.target).value_or("");
    return t;
  }

  bool fits_level(const TaskInstance& t, int level) const override {
    const CountdownLevel& l = kLevels[level - 1];
    const auto large = std::count_if(t.numbers.begin(), t.numbers.end(), [](int64_t v) {
      return std::find(std::begin(kLarge), std::end(kLarge), v) != std::end(kLarge);
    });
    const auto small = std::count_if(t.numbers.begin(), t.numbers.end(),
                                     [](int64_t v) { return v >= 1 && v <= 10; });
    return small == l.small && large == l.large && t.target >= l.min_target &&
           t.target <= l.max_target;
  }

  Reward check(const TaskInstance& instance, std::string_view answer) const override {
    std::string_view expression = answer;
    std::string claimed;
    if (const size_t eq = answer.rfind('='); eq != std::string_view::npos) {
      expression = answer.substr(0, eq);
      claimed = std::string(trim(answer.substr(eq + 1)));
      const std::optional<int64_t> c = parse_integer_answer(claimed);
      if (!c || *c != instance.target) {
        return {0.0, "the answer claims '" + claimed + "', the target is " +
                         std::to_string(instance.target)};
      }
    }
    expression = trim(expression);
    if (expression.size() > kMaxExpressionChars) {
      return {0.0, "the expression is longer than " + std::to_string(kMaxExpressionChars) +
                       " characters"};
    }
    const CountdownExpression e = evaluate_countdown_expression(expression);
    if (!e.value) return {0.0, "not a valid expression: " + e.error};
    std::vector<int64_t> available = instance.numbers;
    for (int64_t n : e.literals) {
      const auto it = std::find(available.begin(), available.end(), n);
      if (it == available.end()) {
        const bool given = std::find(instance.numbers.begin(), instance.numbers.end(), n) !=
                           instance.numbers.end();
        return {0.0, given ? std::to_string(n) + " is used more times than it is given"
                           : std::to_string(n) + " is not one of the numbers"};
      }
      available.erase(it);
    }
    if (e.value->den != 1 || e.value->num != instance.target) {
      std::string got = std::to_string(e.value->num);
      if (e.value->den != 1) {
        got += '/';
        got += std::to_string(e.value->den);
      }
      return {0.0,
              "the expression is " + got + ", the target is " + std::to_string(instance.target)};
    }
    return {1.0, "correct: reaches " + std::to_string(instance.target) + " with " +
                     std::to_string(e.literals.size()) + " numbers"};
  }

 private:
  static TaskInstance make(std::vector<int64_t> numbers, int64_t target, std::string answer) {
    std::sort(numbers.begin(), numbers.end());
    TaskInstance t;
    t.canonical = "countdown:" + join_numbers(numbers, ",") + "=" + std::to_string(target);
    t.question = "Using the numbers " + join_numbers(numbers, ", ") +
                 ", each at most once, and + - * / with parentheses, make " +
                 std::to_string(target) + ".";
    t.answer = std::move(answer);
    t.numbers = std::move(numbers);
    t.target = target;
    return t;
  }

  // Exhaustive search over pairwise combinations (positive integer intermediates) for a
  // problem read from its canonical text. At most 5 numbers (about 10^5 nodes; 6 would take
  // seconds), so a parsed 6-number problem has an empty answer.
  static std::optional<std::string> solve(const std::vector<int64_t>& numbers, int64_t target) {
    if (numbers.size() > 5) return std::nullopt;
    std::vector<Node> pool;
    for (int64_t n : numbers) pool.push_back({n, std::to_string(n), false});
    std::optional<std::string> found;
    search(pool, target, &found);
    return found;
  }
  static void search(std::vector<Node>& pool, int64_t target, std::optional<std::string>* found) {
    for (const Node& n : pool) {
      if (n.value == target) {
        *found = n.text;
        return;
      }
    }
    for (size_t i = 0; i < pool.size() && !*found; ++i) {
      for (size_t j = 0; j < pool.size() && !*found; ++j) {
        if (i == j) continue;
        const Node a = pool[i], b = pool[j];
        for (char op : {'+', '-', '*', '/'}) {
          if ((op == '+' || op == '*') && i > j) continue;  // commutative: one order
          int64_t v;
          if (op == '+') {
            if (__builtin_add_overflow(a.value, b.value, &v)) continue;
          } else if (op == '-') {
            if (a.value <= b.value) continue;
            v = a.value - b.value;
          } else if (op == '*') {
            if (__builtin_mul_overflow(a.value, b.value, &v)) continue;
          } else {
            if (b.value <= 1 || a.value % b.value != 0) continue;
            v = a.value / b.value;
          }
          std::vector<Node> next;
          for (size_t k = 0; k < pool.size(); ++k) {
            if (k != i && k != j) next.push_back(pool[k]);
          }
          next.push_back({v, operand_text(a) + " " + op + " " + operand_text(b), true});
          search(next, target, found);
          if (*found) return;
        }
      }
    }
  }
};

}  // namespace

CountdownExpression evaluate_countdown_expression(std::string_view text) {
  if (text.size() > kMaxExpressionChars) {
    CountdownExpression e;
    e.error = "longer than " + std::to_string(kMaxExpressionChars) + " characters";
    return e;
  }
  return ExpressionParser(text).run();
}

std::unique_ptr<TaskFamily> make_countdown_task() {
  return std::make_unique<CountdownTask>();
}

}  // namespace nanogpt
