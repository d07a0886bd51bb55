// A clean stop on SIGINT/SIGTERM (and mpirun's ways of delivering Ctrl-C): the handlers only
// set a flag; a training loop (train, sft, dpo, rl) polls stop_requested() between steps,
// finishes its step, checkpoints and returns, so Ctrl-C always leaves a usable run directory.
#pragma once

#include <memory>

namespace nanogpt {

// Installs the handlers for its lifetime (the previous ones come back after) and clears the
// flag. under_mpi: also read SIGCONT/SIGTSTP as mpirun sends them (see stop_signals.cpp).
class StopSignalScope {
 public:
  explicit StopSignalScope(bool under_mpi);
  ~StopSignalScope();
  StopSignalScope(const StopSignalScope&) = delete;
  StopSignalScope& operator=(const StopSignalScope&) = delete;

 private:
  struct Saved;
  bool under_mpi_;
  std::unique_ptr<Saved> saved_;  // the handlers before
};

// Set by the signals (or a test); a loop finishes its step, checkpoints and returns.
void request_stop();
bool stop_requested();

}  // namespace nanogpt
