#include "eval/line_regex.hpp"

#include <algorithm>
#include <string>

namespace nanogpt {

void for_each_line_match(const std::regex& re, std::string_view text,
                         const std::function<bool(const std::smatch&)>& visit) {
  size_t start = 0;
  while (start <= text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string_view::npos) end = text.size();
    const std::string line(text.substr(start, std::min(end - start, kMaxRegexLineBytes)));
    for (auto it = std::sregex_iterator(line.begin(), line.end(), re); it != std::sregex_iterator();
         ++it) {
      if (!visit(*it)) return;
    }
    start = end + 1;
  }
}

}  // namespace nanogpt
