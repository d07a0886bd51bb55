// Numbers in model output: what the `numeric` evaluator (evaluators.cpp) and the rubrics'
// numeric check (rubric_check.cpp) find and read, so both agree on what a number is.
#pragma once

#include <optional>
#include <string_view>

namespace nanogpt {

// A decimal number as it appears in text: optional '-', digits possibly grouped by commas, an
// optional fraction and exponent ("-1,234.5", "3e2").
inline constexpr std::string_view kNumberPattern = R"(-?\d[\d,]*(?:\.\d+)?(?:[eE][-+]?\d+)?)";

// A number as text ("1,234.5", "-3e2", surrounding blanks allowed) to a double; nullopt if the
// whole text is not one decimal number (hex, "inf" and "nan" are not).
std::optional<double> parse_number(std::string_view text);

}  // namespace nanogpt
