#include "train/stop_signals.hpp"

#include <atomic>
#include <csignal>

namespace nanogpt {

namespace {

std::atomic<bool> g_stop{false};
std::atomic<bool> g_job_control_stop{false};

void on_signal(int) {
  g_stop.store(true);
}

// Under mpirun, Ctrl-C reaches mpirun alone (each rank has its own process group). mpirun then
// sends every rank SIGCONT at once, SIGTERM after odls_base_sigkill_timeout seconds (default
// 1) and SIGKILL as long again. So a SIGCONT is the first word of a Ctrl-C, unless the job was
// suspended (Ctrl-Z: mpirun forwards SIGTSTP, then SIGCONT on resume).
void on_continue(int) {
  if (!g_job_control_stop.exchange(false)) g_stop.store(true);
}

void on_suspend(int) {
  g_job_control_stop.store(true);
  ::raise(SIGSTOP);  // what SIGTSTP would have done
}

}  // namespace

struct StopSignalScope::Saved {
  struct sigaction int_ {
  }, term{}, usr1{}, cont{}, tstp{};
};

StopSignalScope::StopSignalScope(bool under_mpi)
    : under_mpi_(under_mpi), saved_(std::make_unique<Saved>()) {
  g_stop.store(false);
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, &saved_->int_);
  sigaction(SIGTERM, &sa, &saved_->term);
  sigaction(SIGUSR1, &sa, &saved_->usr1);  // mpirun forwards it to every rank
  if (under_mpi_) {
    sa.sa_handler = on_continue;
    sigaction(SIGCONT, &sa, &saved_->cont);
    sa.sa_handler = on_suspend;
    sigaction(SIGTSTP, &sa, &saved_->tstp);
  }
}

StopSignalScope::~StopSignalScope() {
  sigaction(SIGINT, &saved_->int_, nullptr);
  sigaction(SIGTERM, &saved_->term, nullptr);
  sigaction(SIGUSR1, &saved_->usr1, nullptr);
  if (under_mpi_) {
    sigaction(SIGCONT, &saved_->cont, nullptr);
    sigaction(SIGTSTP, &saved_->tstp, nullptr);
  }
}

void request_stop() {
  g_stop.store(true);
}

bool stop_requested() {
  return g_stop.load();
}

}  // namespace nanogpt
