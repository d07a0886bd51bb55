// Wall-clock seconds since a start, on the steady clock: the one copy of that arithmetic for
// timing steps, phases and runs.
#pragma once

#include <chrono>

namespace nanogpt {

class Stopwatch {
 public:
  Stopwatch() : start_(std::chrono::steady_clock::now()) {}
  void restart() { start_ = std::chrono::steady_clock::now(); }
  double seconds() const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  }

 private:
  std::chrono::steady_clock::time_point start_;
};

}  // namespace nanogpt
