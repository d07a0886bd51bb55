// A persistent pool of worker threads: threads are created once and parked between jobs, so
// a parallel loop costs a wake-up, not a thread creation. Between jobs a worker first spins
// for a while (spin_microseconds(), NANOGPT_POOL_SPIN_US) watching for the next one, and only
// then sleeps on a condition variable; the caller likewise spins before sleeping while it
// waits for the workers. A wake-up through the kernel costs ~30 µs here (measured: a 2-thread
// 24×64×32 product took 32.8 µs a call against 1.3 µs on one thread), more than a small
// product's arithmetic, and a model's step or decode issues its products back to back, so
// the spin catches nearly every job. It is what OpenMP runtimes do (OMP_WAIT_POLICY, libgomp's
// GOMP_SPINCOUNT); the bound keeps an idle pool from holding cores.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace nanogpt {

class ThreadPool {
 public:
  // `threads` counts the calling thread, which works too; 1 means no workers.
  explicit ThreadPool(int threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return static_cast<int>(workers_.size()) + 1; }

  // How long a waiting thread spins before it sleeps: NANOGPT_POOL_SPIN_US microseconds
  // (0: sleep at once, for machines shared with other busy processes), default 200.
  static int spin_microseconds();

  // Runs fn(task, worker) for every task in [0, tasks). Each thread starts on its own
  // contiguous share (thread w of P: tasks [w·tasks/P, (w+1)·tasks/P)), taken one at a time,
  // then takes what is left of the others' shares, so threads that finish early take more.
  // On a quiet machine a thread so gets the same tasks on every call with the same count: the
  // same part of a product's C, which stays in that core's cache from one call to the next
  // (handed out from one shared counter, the parts moved between the cores each call, and
  // every store to C first fetched the line from the other core). Blocks until all are done;
  // rethrows the first exception a task threw (the remaining tasks are skipped).
  void parallel_for(size_t tasks, const std::function<void(size_t task, int worker)>& fn);

  // Shared pool sized by NANOGPT_THREADS, or the hardware threads divided among the ranks an
  // MPI launcher started on this host.
  static ThreadPool& global();
  static int default_threads();
  // The pool kernels run on: the global one unless a Use scope on this thread says otherwise
  // (tests use it to prove results do not depend on the thread count).
  static ThreadPool& current();
  class Use {
   public:
    explicit Use(ThreadPool& pool);
    ~Use();
    Use(const Use&) = delete;
    Use& operator=(const Use&) = delete;

   private:
    ThreadPool* previous_;
  };

 private:
  void worker_loop(int worker);
  void run_tasks(int worker);

  std::vector<std::thread> workers_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::condition_variable done_;
  // A new job is published by storing job_ and its counters, then bumping generation_
  // (release); a worker that sees the new generation (acquire) sees the job.
  std::atomic<uint64_t> generation_{0};
  std::atomic<bool> stopping_{false};
  std::atomic<int> busy_workers_{0};
  const int spin_us_;
  // Takes a task from thread w's share and returns it, or job_tasks_ when the share is done.
  size_t take_from_share(size_t w);

  const std::function<void(size_t, int)>* job_ = nullptr;
  size_t job_tasks_ = 0;
  // Per thread: the next task of its share, on a cache line of its own (the threads take from
  // their own shares at once).
  struct alignas(64) Share {
    std::atomic<size_t> next{0};
    size_t end = 0;
  };
  std::vector<Share> shares_;
  std::atomic<bool> failed_{false};
  std::exception_ptr error_;
};

}  // namespace nanogpt
