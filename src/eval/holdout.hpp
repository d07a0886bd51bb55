// A leaderboard's holdout: the private labels, one class id per row of a text file. The file is
// the host's; the submitter's commands read it to score and never print a label.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace nanogpt {

struct Holdout {
  std::string path;    // as given to load_holdout
  std::string sha256;  // of the file's bytes: a leaderboard's state pins the labels it was built on
  std::vector<int32_t> labels;  // class ids, one per row
  int32_t num_classes = 0;      // largest label + 1
};

// Reads one non-negative integer class id per line ('\n' or "\r\n"; the last newline is
// optional). Any other line — empty, signed, fractional, over 2^31 - 1 — is an InputError naming
// the file and the 1-based row. The label itself is never quoted in a message.
Holdout load_holdout(const std::string& path);

}  // namespace nanogpt
