// The processes of one job and the collectives between them. Under an MPI launcher (mpirun,
// or srun with PMI/PMIx: the launcher's environment variables say so) the world is
// MPI_COMM_WORLD; otherwise it is this process alone, and MPI is never initialised, so a plain
// `nanogpt train` behaves exactly as it does without MPI.
//
// Every collective is started, then waited for: `start_*` queues it and returns an id, `wait`
// blocks until it is done. Open MPI advances a non-blocking collective only inside MPI calls,
// so something must keep calling it while the caller computes. Two ways (CommProgress):
//   kThread: a communication thread owns every MPI call after initialisation; it starts the
//            queued operations in order and tests them, sleeping briefly when nothing moved.
//   kPoll:   no thread; the caller advances the operations by calling progress() (the backward
//            does, between its layers) and wait().
// Operations are started in the order they were queued, on every rank the same, as MPI
// requires of collectives. Blocking helpers (sum, max, barrier, ...) are start + wait.
//
// A wait that outlasts the timeout (NANOGPT_COMM_TIMEOUT seconds, default 600) means another
// rank is dead or hung: this rank prints what it waited for, on which rank and host, and ends
// the whole job (MPI_Abort), so a job never hangs silently.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace nanogpt {

struct CommOp;

enum class CommProgress { kThread, kPoll };

// What this rank's collectives cost since the last reset_stats().
struct CommStats {
  int64_t operations = 0;
  double bytes_sent = 0;  // by this rank, as the ring algorithms send: see comm.cpp
  double busy_s = 0;      // wall time with at least one operation in flight
  double waited_s = 0;    // time callers spent blocked in wait(): the exposed part
  // Communication the callers did not wait for: it ran while they computed.
  double hidden_s() const { return busy_s > waited_s ? busy_s - waited_s : 0.0; }
};

class Comm {
 public:
  using OpId = uint64_t;

  // The job's world: initialises MPI on first use if an MPI launcher started this process.
  static Comm& world();
  // This process alone, whatever started it: a world of one (what single-process code and
  // tests that compare against it run on).
  static Comm& local();
  // Whether an MPI launcher started this process (its environment, no MPI call).
  static bool launched_by_mpi();
  // Ranks of this job on this host, from the launcher's environment before MPI starts (1
  // without a launcher): the thread pool divides the cores by it.
  static int ranks_on_this_host_from_env();
  // Splits this communicator (a collective over it): the ranks passing the same `color` form a
  // new one, ordered by `key`; `name` says what the group is in messages ("replica 1"). A group
  // of one has no MPI communicator: it behaves exactly like local(). Destroy every split
  // communicator before shutdown().
  std::unique_ptr<Comm> split(int color, int key, const std::string& name);
  // Finalises MPI after a clean run (all ranks call it). A no-op without MPI.
  static void shutdown();
  // Ends the whole job with `code`: MPI_Abort under MPI (the launcher kills the other ranks),
  // exit otherwise. Call after printing why.
  [[noreturn]] static void abort_job(int code);

  ~Comm();
  Comm(const Comm&) = delete;
  Comm& operator=(const Comm&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  bool is_root() const { return rank_ == 0; }
  bool distributed() const { return size_ > 1; }
  int local_rank() const { return local_rank_; }  // among the ranks on this host
  int local_size() const { return local_size_; }
  const std::vector<std::string>& hosts() const { return hosts_; }  // by rank
  std::string where() const;  // "rank R of N on HOST", for messages

  CommProgress progress_mode() const { return mode_; }
  // Switch between a communication thread and polling; only with no operation in flight.
  void set_progress_mode(CommProgress mode);

  // Non-blocking collectives over float32 buffers that must stay valid until wait() returns.
  // `what` names the operation in traces and timeout messages.
  OpId start_allreduce_sum(std::span<float> data, std::string what);
  // send holds every rank's part, rank-major (counts[r] floats for rank r); this rank's summed
  // part lands in recv (counts[rank] floats).
  OpId start_reduce_scatter_sum(std::span<const float> send, std::span<float> recv,
                                std::vector<int> counts, std::string what);
  // Every rank's `mine` (counts[r] floats from rank r), concatenated rank-major into `all`.
  OpId start_allgather(std::span<const float> mine, std::span<float> all, std::vector<int> counts,
                       std::string what);
  // The same for raw bytes (e.g. encoded outer gradients).
  OpId start_allgather_bytes(std::span<const uint8_t> mine, std::span<uint8_t> all,
                             std::vector<int> counts, std::string what);
  OpId start_broadcast(std::span<std::byte> data, int root, std::string what);
  void wait(OpId id);
  void wait_all();
  // Advances queued and running operations without blocking (kPoll; harmless under kThread).
  void progress();

  // Blocking helpers.
  double sum(double value, const std::string& what);
  void sum_in_place(std::span<double> values, const std::string& what);
  int64_t max(int64_t value, const std::string& what);
  // Every rank's string, by rank.
  std::vector<std::string> allgather_strings(const std::string& mine, const std::string& what);
  void barrier(const std::string& what);

  CommStats stats() const;
  void reset_stats();
  double timeout_seconds() const { return timeout_s_; }

 private:
  struct Engine;
  explicit Comm(bool join_launcher);
  // A split communicator: `engine` null for a group of one.
  Comm(Engine* engine, std::string name, int world_rank, CommProgress mode);
  OpId start_allgather_typed(const void* mine, size_t mine_count, void* all, size_t all_count,
                             size_t element_bytes, std::vector<int> counts, std::string what);
  void init_mpi();
  OpId queue(CommOp* op);  // takes ownership
  std::string wait_name(OpId id);

  int rank_ = 0, size_ = 1, local_rank_ = 0, local_size_ = 1;
  std::vector<std::string> hosts_;
  std::string name_;    // of a split communicator; empty for the world and local()
  int world_rank_ = 0;  // this process's rank in the world (split communicators)
  CommProgress mode_ = CommProgress::kThread;
  double timeout_s_ = 600;
  std::unique_ptr<Engine> engine_;  // null in a world of one
};

// Splits n elements into `parts` contiguous slices as evenly as possible: slice p is
// [⌊p·n/parts⌋, ⌊(p+1)·n/parts⌋), so sizes differ by at most one. Every sharded layout (ZeRO-1
// Adam state, a rank's part of the batch or of the validation set) uses it.
struct SliceRange {
  int64_t begin = 0, end = 0;
  int64_t size() const { return end - begin; }
};
SliceRange even_slice(int64_t n, int parts, int part);

}  // namespace nanogpt
