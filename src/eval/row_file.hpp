// The leaderboard's text files hold one value per line: the holdout's labels and a submission's
// predictions. One splitter for both, so they agree on what a row is.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace nanogpt {

// Splits `contents` at '\n' (a "\r\n" ending loses its '\r'); a final newline ends the last row
// rather than starting an empty one. Row i of the result is line i + 1 of the file.
std::vector<std::string_view> split_rows(std::string_view contents);

}  // namespace nanogpt
