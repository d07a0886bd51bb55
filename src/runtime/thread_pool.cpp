#include "runtime/thread_pool.hpp"

#include <chrono>
#include <cstdlib>
#include <string>

#include "runtime/comm.hpp"
#include "runtime/error.hpp"
#include "runtime/spin_pause.hpp"

namespace nanogpt {

namespace {

// Spins until done() or `micros` microseconds have passed; returns done().
template <class Done>
bool spin_until(const Done& done, int micros) {
  if (micros <= 0) return done();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::microseconds(micros);
  for (unsigned i = 1;; ++i) {
    if (done()) return true;
    spin_pause();
    // The clock costs ~20 ns: read it every 64 pauses.
    if ((i & 63) == 0 && std::chrono::steady_clock::now() >= deadline) return done();
  }
}

// The whole number in environment variable `name`, in [lo, hi]; `fallback` when it is unset.
// Anything else is an InputError: "NAME='value' is not <what>; set it to <how>".
int env_whole_number(const char* name, long lo, long hi, int fallback, const char* what,
                     const char* how) {
  const char* env = std::getenv(name);
  if (env == nullptr) return fallback;
  char* end = nullptr;
  const long n = std::strtol(env, &end, 10);
  if (end == env || *end != '\0' || n < lo || n > hi) {
    throw InputError(std::string(name) + "='" + env + "' is not " + what + "; set it to " + how);
  }
  return static_cast<int>(n);
}

}  // namespace

ThreadPool::ThreadPool(int threads) : spin_us_(spin_microseconds()) {
  if (threads < 1) threads = 1;
  shares_ = std::vector<Share>(static_cast<size_t>(threads));
  for (int w = 1; w < threads; ++w) workers_.emplace_back([this, w] { worker_loop(w); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  for (auto& t : workers_) t.join();
}

int ThreadPool::spin_microseconds() {
  return env_whole_number("NANOGPT_POOL_SPIN_US", 0, 1'000'000, 200, "a spin time",
                          "whole microseconds from 0 (sleep at once) to 1000000");
}

size_t ThreadPool::take_from_share(size_t w) {
  Share& share = shares_[w];
  // A share past its end is not incremented further (a counter racing to overflow).
  if (share.next.load(std::memory_order_relaxed) >= share.end) return job_tasks_;
  const size_t task = share.next.fetch_add(1, std::memory_order_relaxed);
  return task < share.end ? task : job_tasks_;
}

void ThreadPool::run_tasks(int worker) {
  const size_t threads = shares_.size();
  // Its own share first, then the others' in turn.
  for (size_t i = 0; i < threads; ++i) {
    const size_t w = (static_cast<size_t>(worker) + i) % threads;
    for (;;) {
      if (failed_.load(std::memory_order_relaxed)) return;
      const size_t task = take_from_share(w);
      if (task >= job_tasks_) break;
      try {
        (*job_)(task, worker);
      } catch (...) {
        std::lock_guard<std::mutex> lock(mutex_);
        if (!error_) error_ = std::current_exception();
        failed_ = true;
      }
    }
  }
}

void ThreadPool::worker_loop(int worker) {
  uint64_t seen = 0;
  for (;;) {
    auto published = [&] {
      return stopping_.load(std::memory_order_acquire) ||
             generation_.load(std::memory_order_acquire) != seen;
    };
    if (!spin_until(published, spin_us_)) {
      std::unique_lock<std::mutex> lock(mutex_);
      wake_.wait(lock, published);
    }
    if (stopping_.load(std::memory_order_acquire)) return;
    seen = generation_.load(std::memory_order_acquire);
    run_tasks(worker);
    // The last worker out wakes a caller that went to sleep; under the lock, so the caller
    // cannot check the count and then sleep past this notification.
    if (busy_workers_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
      std::lock_guard<std::mutex> lock(mutex_);
      done_.notify_one();
    }
  }
}

void ThreadPool::parallel_for(size_t tasks,
                              const std::function<void(size_t task, int worker)>& fn) {
  if (tasks == 0) return;
  if (workers_.empty() || tasks == 1) {
    for (size_t t = 0; t < tasks; ++t) fn(t, 0);
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    job_ = &fn;
    job_tasks_ = tasks;
    const size_t threads = shares_.size();
    for (size_t w = 0; w < threads; ++w) {
      shares_[w].next.store(w * tasks / threads, std::memory_order_relaxed);
      shares_[w].end = (w + 1) * tasks / threads;
    }
    failed_ = false;
    error_ = nullptr;
    busy_workers_.store(static_cast<int>(workers_.size()), std::memory_order_relaxed);
    generation_.fetch_add(1, std::memory_order_release);
  }
  wake_.notify_all();  // no system call when every worker is spinning
  run_tasks(0);
  auto all_done = [&] { return busy_workers_.load(std::memory_order_acquire) == 0; };
  std::exception_ptr error;
  if (!spin_until(all_done, spin_us_)) {
    std::unique_lock<std::mutex> lock(mutex_);
    done_.wait(lock, all_done);
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    job_ = nullptr;
    error = error_;
    error_ = nullptr;
  }
  if (error) std::rethrow_exception(error);
}

int ThreadPool::default_threads() {
  if (std::getenv("NANOGPT_THREADS") != nullptr) {
    return env_whole_number("NANOGPT_THREADS", 1, 4096, 1, "a thread count",
                            "a whole number from 1 to 4096");
  }
  // Ranks of one job that share this host share its cores.
  const unsigned hw = std::thread::hardware_concurrency();
  const int cores = hw == 0 ? 1 : static_cast<int>(hw);
  return std::max(1, cores / Comm::ranks_on_this_host_from_env());
}

namespace {
thread_local ThreadPool* g_current_override = nullptr;
}

ThreadPool& ThreadPool::current() {
  return g_current_override != nullptr ? *g_current_override : global();
}

ThreadPool::Use::Use(ThreadPool& pool) : previous_(g_current_override) {
  g_current_override = &pool;
}

ThreadPool::Use::~Use() {
  g_current_override = previous_;
}

ThreadPool& ThreadPool::global() {
  static ThreadPool pool(default_threads());
  return pool;
}

}  // namespace nanogpt
