// Scoped timing of operations, in the manner of Triton's Proton: code opens a ProfileScope
// around each operation it wants to see, saying what kind of operation it is, which one, its
// shape, and the FLOPs and bytes it does and moves. `--profile FILE` then gives a Chrome trace
// (open it in https://ui.perfetto.dev or chrome://tracing) and a table of where the time went.
//
//   {
//     ProfileScope scope("gemm", "blocks.3.mlp.c_fc.fwd", {M, N, K}, 2.0 * M * N * K,
//                        4.0 * (M * K + N * K + M * N));
//     gemm(...);
//   }
//
// Scopes nest (a "train_step" around the operations of one step). The table charges each
// scope its self time, its duration minus that of the scopes nested in it, so the shares add up
// to 100% and a parent's share is the time nothing finer accounts for. Accordingly a scope's
// flops and bytes should be the work of its self time only: a parent whose children report
// their own work passes 0, or the table counts that work twice.
//
// Events belong to the thread that opened the scope. Most kernels parallelise inside one
// operation, so one scope on the calling thread covers all of its workers' time. Where whole
// operations run as pool tasks instead (Muon's matrices), scopes opened inside a task belong to
// the worker that ran it and nest only under that thread's open scopes; their self times are
// then thread time, so with several threads busy at once the table can charge such an
// operation more time than the wall clock saw. Recording is thread-safe, and each thread keeps
// its own stack of open scopes, so scopes may open on any thread, pool workers included.
//
// When the profiler is off a scope costs one relaxed atomic load: no clock read, no
// allocation. Argument expressions are still evaluated, so compute a name with string
// concatenation only under `if (Profiler::enabled())`.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>

namespace nanogpt {

namespace profiler_internal {
extern std::atomic<bool> g_enabled;
}  // namespace profiler_internal

class Profiler {
 public:
  // Enables recording and clears the events and totals of any previous session.
  static void start();
  static void stop();
  static bool enabled() { return profiler_internal::g_enabled.load(std::memory_order_relaxed); }

  // The events as Chrome trace JSON ("X" events; args carry op_type, shape, flops, bytes),
  // written atomically. Throws SystemError if the file cannot be written.
  static void write_chrome_trace(const std::string& path);
  // Time share (of self time), count, self and total milliseconds, GFLOP/s and GB/s by
  // operation type, then the names that took the most self time.
  static std::string summary_table();

  // The trace keeps at most this many events (about 100 bytes each in memory, 250 in the
  // file); later ones still count in the table, which notes how many the trace lacks.
  static constexpr size_t kDefaultEventLimit = 2'000'000;
  static void set_event_limit(size_t limit);
  static size_t recorded_events();
  static size_t dropped_events();

  // An interval that ran beside the threads' scopes rather than inside one (a collective in
  // flight while the backward computes), on its own named track of the trace. steady_clock
  // nanoseconds since its epoch. Trace only: the table's shares stay those of the threads.
  static void record_interval(const char* op_type, std::string_view name, std::string_view track,
                              int64_t start_ns, int64_t end_ns, double bytes);
};

class ProfileScope {
 public:
  // `op_type` groups the table ("gemm", "attention_fwd", "attention_bwd", "loss_fwd",
  // "loss_bwd", "rmsnorm", "elementwise", "newton_schulz", "adam", "muon", "data", "eval",
  // ...); `name` says which one ("blocks.3.mlp.c_fc.fwd"); `shape` gives its dimensions (up to
  // six are kept). name and shape are copied, so temporaries are fine.
  ProfileScope(const char* op_type, std::string_view name, std::initializer_list<int64_t> shape,
               double flops, double bytes) {
    if (Profiler::enabled()) begin(op_type, name, shape, flops, bytes);
  }
  ~ProfileScope() {
    if (active_) end();
  }
  ProfileScope(const ProfileScope&) = delete;
  ProfileScope& operator=(const ProfileScope&) = delete;

 private:
  void begin(const char* op_type, std::string_view name, std::initializer_list<int64_t> shape,
             double flops, double bytes);
  void end();
  bool active_ = false;
};

// `--profile FILE` of a command. The constructor checks that FILE can be created (before any
// long work) and, unless told to wait for start(), starts the profiler; finish() stops it,
// writes the trace and prints the table to stderr. An empty path does nothing at all. A command
// that fails before finish() writes nothing.
class ProfileSession {
 public:
  explicit ProfileSession(std::string path, bool start_now = true);
  ~ProfileSession();
  ProfileSession(const ProfileSession&) = delete;
  ProfileSession& operator=(const ProfileSession&) = delete;
  void start();
  void finish();

 private:
  std::string path_;
  bool active_ = false;
};

}  // namespace nanogpt
