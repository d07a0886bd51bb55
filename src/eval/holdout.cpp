#include "eval/holdout.hpp"

#include <charconv>

#include "eval/row_file.hpp"
#include "runtime/error.hpp"
#include "runtime/file_io.hpp"
#include "runtime/sha256.hpp"

namespace nanogpt {

Holdout load_holdout(const std::string& path) {
  Holdout h;
  h.path = path;
  const std::string contents = read_file(path);
  h.sha256 = sha256_hex(contents);
  const std::vector<std::string_view> rows = split_rows(contents);
  if (rows.empty()) {
    throw InputError("holdout '" + path +
                     "' has no rows; it needs one class id (0, 1, ...) per line");
  }
  h.labels.reserve(rows.size());
  for (size_t i = 0; i < rows.size(); ++i) {
    const std::string_view row = rows[i];
    int32_t label = -1;
    const auto [end, ec] = std::from_chars(row.data(), row.data() + row.size(), label);
    // from_chars takes a leading '-'; a class id is non-negative, so that is refused too.
    if (row.empty() || ec != std::errc() || end != row.data() + row.size() || label < 0) {
      throw InputError("holdout '" + path + "' row " + std::to_string(i + 1) +
                       " is not a class id: each line must be one non-negative integer below "
                       "2^31 (the row's text is not shown: it is a private label)");
    }
    h.labels.push_back(label);
    if (label + 1 > h.num_classes) h.num_classes = label + 1;
  }
  return h;
}

}  // namespace nanogpt
