#include "eval/task_family.hpp"

#include <cctype>
#include <limits>

namespace nanogpt {

std::string_view trim(std::string_view s) {
  size_t b = 0, e = s.size();
  while (b < e && std::isspace(static_cast<unsigned char>(s[b]))) ++b;
  while (e > b && std::isspace(static_cast<unsigned char>(s[e - 1]))) --e;
  return s.substr(b, e - b);
}

std::string join_numbers(const std::vector<int64_t>& v, std::string_view separator) {
  std::string out;
  for (size_t i = 0; i < v.size(); ++i) {
    if (i > 0) out += separator;
    out += std::to_string(v[i]);
  }
  return out;
}

namespace {

bool is_digit(char c) {
  return c >= '0' && c <= '9';
}

// Digits only (at least one) to an int64 magnitude with the sign applied; nullopt on overflow.
std::optional<int64_t> digits_to_int(std::string_view digits, bool negative) {
  if (digits.empty()) return std::nullopt;
  // Accumulate as a negative number so INT64_MIN is reachable.
  int64_t value = 0;
  for (char c : digits) {
    if (!is_digit(c)) return std::nullopt;
    const int d = c - '0';
    if (value < (std::numeric_limits<int64_t>::min() + d) / 10) return std::nullopt;
    value = value * 10 - d;
  }
  if (!negative) {
    if (value == std::numeric_limits<int64_t>::min()) return std::nullopt;
    return -value;
  }
  return value;
}

}  // namespace

std::optional<int64_t> parse_integer_answer(std::string_view text) {
  std::string_view s = trim(text);
  if (!s.empty() && s.back() == '.') s.remove_suffix(1);
  // A fractional part of zeros only ("42.0") is still the integer.
  if (const size_t dot = s.find('.'); dot != std::string_view::npos) {
    std::string_view frac = s.substr(dot + 1);
    if (frac.empty()) return std::nullopt;
    for (char c : frac) {
      if (c != '0') return std::nullopt;
    }
    s = s.substr(0, dot);
  }
  bool negative = false;
  if (!s.empty() && (s[0] == '+' || s[0] == '-')) {
    negative = s[0] == '-';
    s.remove_prefix(1);
  }
  if (s.find(',') == std::string_view::npos) return digits_to_int(s, negative);
  // Thousands separators: 1-3 digits, then groups of exactly three.
  std::string digits;
  const std::vector<std::string_view> groups = split_on(s, ',');
  for (size_t i = 0; i < groups.size(); ++i) {
    const size_t n = groups[i].size();
    if (i == 0 ? (n < 1 || n > 3) : n != 3) return std::nullopt;
    digits += groups[i];
  }
  return digits_to_int(digits, negative);
}

std::optional<std::vector<int64_t>> parse_integer_list(std::string_view text) {
  std::string_view s = trim(text);
  if (s.size() >= 2 &&
      ((s.front() == '[' && s.back() == ']') || (s.front() == '(' && s.back() == ')'))) {
    s = trim(s.substr(1, s.size() - 2));
  }
  std::vector<int64_t> out;
  size_t i = 0;
  bool need_item = true;  // after a comma an item must follow
  while (i < s.size()) {
    const char c = s[i];
    if (std::isspace(static_cast<unsigned char>(c))) {
      ++i;
    } else if (c == ',') {
      if (need_item) return std::nullopt;  // ",," or a leading comma
      need_item = true;
      ++i;
    } else if (c == '-' || is_digit(c)) {
      size_t j = i + 1;
      while (j < s.size() && is_digit(s[j])) ++j;
      if (j < s.size() && !std::isspace(static_cast<unsigned char>(s[j])) && s[j] != ',') {
        return std::nullopt;
      }
      const std::optional<int64_t> v =
          digits_to_int(s.substr(c == '-' ? i + 1 : i, j - i - (c == '-' ? 1 : 0)), c == '-');
      if (!v) return std::nullopt;
      out.push_back(*v);
      need_item = false;
      i = j;
    } else {
      return std::nullopt;
    }
  }
  if (need_item && !out.empty()) return std::nullopt;  // a trailing comma
  return out;
}

int64_t uniform_int(Rng& rng, int64_t lo, int64_t hi) {
  const uint64_t span = static_cast<uint64_t>(hi - lo) + 1;
  // The modulo bias is below 2^-40 for every range a generator uses; determinism matters more.
  return lo + static_cast<int64_t>(rng.next_u64() % span);
}

std::optional<int64_t> parse_plain_integer(std::string_view text) {
  if (text.empty()) return std::nullopt;
  const bool negative = text[0] == '-';
  if (negative) text.remove_prefix(1);
  if (text.empty() || (text.size() > 1 && text[0] == '0')) return std::nullopt;
  return digits_to_int(text, negative);
}

std::vector<std::string_view> split_on(std::string_view s, char separator) {
  std::vector<std::string_view> out;
  size_t start = 0;
  for (;;) {
    const size_t at = s.find(separator, start);
    if (at == std::string_view::npos) {
      out.push_back(s.substr(start));
      return out;
    }
    out.push_back(s.substr(start, at - start));
    start = at + 1;
  }
}

}  // namespace nanogpt
