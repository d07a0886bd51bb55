#include "eval/row_file.hpp"

namespace nanogpt {

std::vector<std::string_view> split_rows(std::string_view contents) {
  std::vector<std::string_view> rows;
  size_t start = 0;
  while (start < contents.size()) {
    size_t end = contents.find('\n', start);
    if (end == std::string_view::npos) end = contents.size();
    std::string_view row = contents.substr(start, end - start);
    if (!row.empty() && row.back() == '\r') row.remove_suffix(1);
    rows.push_back(row);
    start = end + 1;
  }
  return rows;
}

}  // namespace nanogpt
