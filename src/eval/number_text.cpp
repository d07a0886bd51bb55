#include "eval/number_text.hpp"

#include <cctype>
#include <cmath>
#include <cstdlib>
#include <string>

#include "eval/task_family.hpp"

namespace nanogpt {

std::optional<double> parse_number(std::string_view text) {
  std::string s;
  for (char ch : trim(text)) {
    if (ch != ',') s += ch;
  }
  if (s.empty()) return std::nullopt;
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  if (end != s.c_str() + s.size() || !std::isfinite(v)) return std::nullopt;
  // strtod also takes hex, "inf" and "nan"; only decimal numbers are numbers here.
  for (char ch : s) {
    if (!(std::isdigit(static_cast<unsigned char>(ch)) || ch == '.' || ch == '-' || ch == '+' ||
          ch == 'e' || ch == 'E')) {
      return std::nullopt;
    }
  }
  return v;
}

}  // namespace nanogpt
