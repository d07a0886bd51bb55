// A one-line progress display (done/total, MB/s, ETA) on stderr, shown only when stderr is a
// terminal so logs and pipes stay clean.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace nanogpt {

class ProgressBar {
 public:
  ProgressBar(std::string label, uint64_t total_bytes);
  ~ProgressBar();
  void update(uint64_t done_bytes);
  void finish();
  static bool stderr_is_terminal();

 private:
  void draw(uint64_t done, bool final);
  std::string label_;
  uint64_t total_;
  bool enabled_;
  bool finished_ = false;
  std::chrono::steady_clock::time_point start_;
  std::chrono::steady_clock::time_point last_draw_;
};

}  // namespace nanogpt
