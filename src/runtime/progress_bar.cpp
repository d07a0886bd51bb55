#include "runtime/progress_bar.hpp"

#include <unistd.h>

#include <cstdio>

namespace nanogpt {

bool ProgressBar::stderr_is_terminal() {
  return ::isatty(STDERR_FILENO) == 1;
}

ProgressBar::ProgressBar(std::string label, uint64_t total_bytes)
    : label_(std::move(label)),
      total_(total_bytes),
      enabled_(stderr_is_terminal()),
      start_(std::chrono::steady_clock::now()),
      last_draw_(start_) {}

ProgressBar::~ProgressBar() {
  // Leave the terminal on a fresh line if the work ended early (an error, Ctrl-C).
  if (enabled_ && !finished_) std::fputc('\n', stderr);
}

void ProgressBar::update(uint64_t done_bytes) {
  if (!enabled_) return;
  auto now = std::chrono::steady_clock::now();
  if (now - last_draw_ < std::chrono::milliseconds(100)) return;
  last_draw_ = now;
  draw(done_bytes, false);
}

void ProgressBar::finish() {
  if (!enabled_ || finished_) return;
  draw(total_, true);
  finished_ = true;
}

void ProgressBar::draw(uint64_t done, bool final) {
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  double frac = total_ == 0 ? 1.0 : static_cast<double>(done) / static_cast<double>(total_);
  double rate = seconds > 0 ? static_cast<double>(done) / 1e6 / seconds : 0.0;
  double eta = (rate > 0 && frac < 1) ? (static_cast<double>(total_ - done) / 1e6) / rate : 0.0;
  constexpr int kWidth = 30;
  int filled = static_cast<int>(frac * kWidth);
  char bar[kWidth + 1];
  for (int i = 0; i < kWidth; ++i) bar[i] = i < filled ? '#' : '.';
  bar[kWidth] = '\0';
  std::fprintf(stderr, "\r%s [%s] %5.1f%% %7.1f MB/s  ETA %4.0fs%s", label_.c_str(), bar,
               100.0 * frac, rate, eta, final ? "\n" : "");
  std::fflush(stderr);
}

}  // namespace nanogpt
