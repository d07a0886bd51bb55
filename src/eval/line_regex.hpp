// Searching model output with std::regex line by line. libstdc++'s matcher recurses per
// character and overflows an 8 MiB stack near 10^4 characters under AddressSanitizer (10^5
// without), so a search sees each line's first kMaxRegexLineBytes bytes only: the depth is
// bounded by that, and an output of any length is safe. The evaluators (evaluators.cpp) and the
// rubric checks (rubric_check.cpp) search this way, so a pattern means the same in both.
#pragma once

#include <cstddef>
#include <functional>
#include <regex>
#include <string_view>

namespace nanogpt {

inline constexpr size_t kMaxRegexLineBytes = 2048;

// Calls visit on every match of `re` in `text`, line after line (lines end at '\n', which no
// line contains), until visit returns false.
void for_each_line_match(const std::regex& re, std::string_view text,
                         const std::function<bool(const std::smatch&)>& visit);

}  // namespace nanogpt
