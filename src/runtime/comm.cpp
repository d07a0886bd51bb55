#include "runtime/comm.hpp"

// The C API only: Open MPI's deprecated C++ bindings would need their own library.
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <thread>

#include "runtime/error.hpp"
#include "runtime/profiler.hpp"

namespace nanogpt {

namespace {

using Clock = std::chrono::steady_clock;

const char* env(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? v : nullptr;
}

int env_int(const char* name, int fallback) {
  const char* v = env(name);
  if (v == nullptr) return fallback;
  char* end = nullptr;
  const long n = std::strtol(v, &end, 10);
  return end != v && *end == '\0' && n > 0 && n < (1 << 24) ? static_cast<int>(n) : fallback;
}

void check_mpi(int code, const std::string& what) {
  if (code == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(code, text, &len);
  throw Error("MPI: " + what + " failed: " + std::string(text, static_cast<size_t>(len)));
}

int count_as_int(size_t n, const std::string& what) {
  if (n > static_cast<size_t>(std::numeric_limits<int>::max())) {
    throw Error("internal: " + what + " sends " + std::to_string(n) +
                " elements, more than one MPI call takes (2^31 - 1)");
  }
  return static_cast<int>(n);
}

// Every MPI call after initialisation, on any communicator, is made under this one lock: a
// split communicator's engine and the world's may each have a communication thread, and
// MPI_THREAD_SERIALIZED allows one thread in MPI at a time.
std::mutex& mpi_mutex() {
  static std::mutex* m = new std::mutex;  // never destroyed: engines may outlive statics
  return *m;
}

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

}  // namespace

SliceRange even_slice(int64_t n, int parts, int part) {
  return {n * part / parts, n * (part + 1) / parts};
}

// One collective: its arguments, its MPI request once started, and when it was queued.
struct CommOp {
  enum class Kind { kAllreduce, kReduceScatter, kAllgather, kBroadcast };
  Kind kind = Kind::kAllreduce;
  std::string what;
  void* data = nullptr;        // allreduce, broadcast: in place; the others' output
  const void* send = nullptr;  // reduce-scatter, allgather input
  int count = 0;               // allreduce, broadcast, allgather: this rank's elements
  std::vector<int> counts, displs;
  MPI_Datatype type = MPI_FLOAT;
  MPI_Op reduce = MPI_SUM;
  int root = 0;
  MPI_Request request = MPI_REQUEST_NULL;
  bool done = false;
  Clock::time_point queued_at;
  double bytes_sent = 0;
};

// The MPI side of a communicator of more than one process. Every MPI call after initialisation
// goes through step(), under `mutex` (the process's one MPI lock, shared by every engine): on
// the communication thread (kThread) or on the caller's (kPoll), so MPI_THREAD_SERIALIZED
// suffices.
struct Comm::Engine {
  MPI_Comm comm = MPI_COMM_NULL;
  std::mutex& mutex = mpi_mutex();
  std::condition_variable work;                       // new operations queued, or stop
  std::condition_variable done;                       // an operation finished
  std::map<Comm::OpId, std::unique_ptr<CommOp>> ops;  // queued or running or finished, not waited
  std::deque<CommOp*> to_start;                       // in queue order
  std::vector<CommOp*> running;
  Comm::OpId next_id = 1;
  CommStats stats;
  int in_flight = 0;  // queued or running, not finished
  Clock::time_point busy_since;
  std::thread thread;
  bool thread_running = false, stopping = false;
  std::string error;  // an MPI failure on the communication thread, for the waiter to throw

  // Starts what is queued, tests what runs; returns whether anything finished. Caller holds
  // the mutex.
  bool step() {
    while (!to_start.empty()) {
      CommOp* op = to_start.front();
      to_start.pop_front();
      start(*op);
      running.push_back(op);
    }
    bool finished = false;
    for (size_t i = 0; i < running.size();) {
      CommOp* op = running[i];
      int flag = 0;
      check_mpi(MPI_Test(&op->request, &flag, MPI_STATUS_IGNORE), "testing " + op->what);
      if (flag == 0) {
        ++i;
        continue;
      }
      op->done = true;
      const Clock::time_point done_at = Clock::now();
      if (--in_flight == 0) {
        stats.busy_s += std::chrono::duration<double>(done_at - busy_since).count();
      }
      if (Profiler::enabled()) {
        auto ns = [](Clock::time_point t) {
          return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
        };
        Profiler::record_interval("comm", op->what, "communication", ns(op->queued_at), ns(done_at),
                                  op->bytes_sent);
      }
      running[i] = running.back();
      running.pop_back();
      finished = true;
    }
    return finished;
  }

  void start(CommOp& op) {
    int rc = MPI_SUCCESS;
    switch (op.kind) {
      case CommOp::Kind::kAllreduce:
        rc = MPI_Iallreduce(MPI_IN_PLACE, op.data, op.count, op.type, op.reduce, comm, &op.request);
        break;
      case CommOp::Kind::kReduceScatter:
        rc = MPI_Ireduce_scatter(op.send, op.data, op.counts.data(), op.type, op.reduce, comm,
                                 &op.request);
        break;
      case CommOp::Kind::kAllgather:
        rc = MPI_Iallgatherv(op.send, op.count, op.type, op.data, op.counts.data(),
                             op.displs.data(), op.type, comm, &op.request);
        break;
      case CommOp::Kind::kBroadcast:
        rc = MPI_Ibcast(op.data, op.count, op.type, op.root, comm, &op.request);
        break;
    }
    check_mpi(rc, "starting " + op.what);
  }

  void thread_loop() {
    std::unique_lock<std::mutex> lock(mutex);
    while (!stopping) {
      if (to_start.empty() && running.empty()) {
        work.wait(lock, [&] { return stopping || !to_start.empty(); });
        continue;
      }
      bool finished = false;
      try {
        finished = step();
      } catch (const std::exception& e) {
        error = e.what();
        for (CommOp* op : running) op->done = true;
        running.clear();
        finished = true;
      }
      if (finished) done.notify_all();
      if (!finished && !running.empty()) {
        // Nothing moved: let the compute threads have the core for a moment. Short enough
        // that a finished transfer is noticed well within a layer's backward.
        lock.unlock();
        std::this_thread::sleep_for(std::chrono::microseconds(50));
        lock.lock();
      }
    }
  }

  void start_thread() {
    if (thread_running) return;
    stopping = false;
    thread_running = true;
    thread = std::thread([this] { thread_loop(); });
  }
  void stop_thread() {
    if (!thread_running) return;
    {
      std::lock_guard<std::mutex> lock(mutex);
      stopping = true;
    }
    work.notify_all();
    thread.join();
    thread_running = false;
  }
};

bool Comm::launched_by_mpi() {
  return env("OMPI_COMM_WORLD_SIZE") != nullptr || env("PMIX_RANK") != nullptr ||
         env("PMI_RANK") != nullptr || env("PMI_SIZE") != nullptr;
}

int Comm::ranks_on_this_host_from_env() {
  if (!launched_by_mpi()) return 1;
  if (const int n = env_int("OMPI_COMM_WORLD_LOCAL_SIZE", 0); n > 0) return n;
  if (const int n = env_int("MPI_LOCALNRANKS", 0); n > 0) return n;  // MPICH's Hydra
  return 1;
}

Comm& Comm::world() {
  // Never destroyed: it outlives every static that might use it.
  static Comm* world = new Comm(/*join_launcher=*/true);
  return *world;
}

Comm& Comm::local() {
  static Comm* local = new Comm(/*join_launcher=*/false);
  return *local;
}

Comm::Comm(bool join_launcher) {
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  hosts_ = {host};
  if (const char* t = env("NANOGPT_COMM_TIMEOUT")) {
    char* end = nullptr;
    const double s = std::strtod(t, &end);
    if (end == t || *end != '\0' || !(s > 0)) {
      throw InputError(std::string("NANOGPT_COMM_TIMEOUT='") + t +
                       "' is not a number of seconds; set it to a positive number, e.g. 600");
    }
    timeout_s_ = s;
  }
  if (join_launcher && launched_by_mpi()) init_mpi();
}

Comm::Comm(Engine* engine, std::string name, int world_rank, CommProgress mode)
    : name_(std::move(name)), world_rank_(world_rank), mode_(mode), engine_(engine) {
  timeout_s_ = Comm::world().timeout_s_;
  if (!engine_) {
    hosts_ = {Comm::world().hosts_[static_cast<size_t>(world_rank)]};
    return;
  }
  MPI_Comm_rank(engine_->comm, &rank_);
  MPI_Comm_size(engine_->comm, &size_);
  MPI_Comm local = MPI_COMM_NULL;
  {
    std::lock_guard<std::mutex> lock(engine_->mutex);
    check_mpi(
        MPI_Comm_split_type(engine_->comm, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &local),
        "MPI_Comm_split_type");
    MPI_Comm_rank(local, &local_rank_);
    MPI_Comm_size(local, &local_size_);
    MPI_Comm_free(&local);
  }
  if (mode_ == CommProgress::kThread) engine_->start_thread();
  hosts_ = allgather_strings(Comm::world().hosts_[static_cast<size_t>(world_rank)],
                             "host names of " + name_);
}

std::unique_ptr<Comm> Comm::split(int color, int key, const std::string& name) {
  const int world_rank = name_.empty() ? rank_ : world_rank_;
  if (!engine_) return std::unique_ptr<Comm>(new Comm(nullptr, name, world_rank, mode_));
  MPI_Comm part = MPI_COMM_NULL;
  {
    std::lock_guard<std::mutex> lock(engine_->mutex);
    check_mpi(MPI_Comm_split(engine_->comm, color, key, &part), "splitting into " + name);
  }
  int part_size = 0;
  MPI_Comm_size(part, &part_size);
  if (part_size == 1) {
    // A group of one communicates with nobody: it is a world of one, exactly like local().
    std::lock_guard<std::mutex> lock(engine_->mutex);
    MPI_Comm_free(&part);
    return std::unique_ptr<Comm>(new Comm(nullptr, name, world_rank, mode_));
  }
  auto* engine = new Engine;
  engine->comm = part;
  MPI_Comm_set_errhandler(part, MPI_ERRORS_RETURN);
  return std::unique_ptr<Comm>(new Comm(engine, name, world_rank, mode_));
}

void Comm::init_mpi() {
  int provided = 0;
  check_mpi(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided), "MPI_Init_thread");
  engine_ = std::make_unique<Engine>();
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  check_mpi(MPI_Comm_dup(MPI_COMM_WORLD, &engine_->comm), "MPI_Comm_dup");
  MPI_Comm_set_errhandler(engine_->comm, MPI_ERRORS_RETURN);
  MPI_Comm_rank(engine_->comm, &rank_);
  MPI_Comm_size(engine_->comm, &size_);
  MPI_Comm local = MPI_COMM_NULL;
  check_mpi(MPI_Comm_split_type(engine_->comm, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &local),
            "MPI_Comm_split_type");
  MPI_Comm_rank(local, &local_rank_);
  MPI_Comm_size(local, &local_size_);
  MPI_Comm_free(&local);
  // Without a thread level that lets another thread make the calls, poll.
  mode_ = provided >= MPI_THREAD_SERIALIZED ? CommProgress::kThread : CommProgress::kPoll;
  if (mode_ == CommProgress::kThread) engine_->start_thread();
  char name[MPI_MAX_PROCESSOR_NAME] = {};
  int len = 0;
  MPI_Get_processor_name(name, &len);
  hosts_ = allgather_strings(std::string(name, static_cast<size_t>(len)), "host names");
}

Comm::~Comm() {
  if (!engine_) return;
  engine_->stop_thread();
  std::lock_guard<std::mutex> lock(engine_->mutex);
  int finalized = 0;
  MPI_Finalized(&finalized);
  // With operations still in flight this is an error path (the job is about to end): leave
  // the communicator to MPI rather than block on ranks that may be gone.
  if (finalized == 0 && engine_->ops.empty()) MPI_Comm_free(&engine_->comm);
}

void Comm::shutdown() {
  Comm& c = world();
  if (!c.engine_) return;
  c.wait_all();
  c.engine_->stop_thread();
  MPI_Comm_free(&c.engine_->comm);
  MPI_Finalize();
  c.engine_.reset();
}

void Comm::abort_job(int code) {
  std::fflush(stdout);
  std::fflush(stderr);
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (initialized != 0 && finalized == 0) MPI_Abort(MPI_COMM_WORLD, code);
  std::_Exit(code);
}

std::string Comm::where() const {
  std::string s = "rank " + std::to_string(rank_) + " of " + std::to_string(size_);
  if (!name_.empty()) s += " in " + name_ + " (world rank " + std::to_string(world_rank_) + ")";
  return s + " on " + hosts_[static_cast<size_t>(rank_)];
}

void Comm::set_progress_mode(CommProgress mode) {
  if (!engine_ || mode == mode_) {
    mode_ = mode;
    return;
  }
  {
    std::lock_guard<std::mutex> lock(engine_->mutex);
    if (!engine_->ops.empty()) {
      throw Error("internal: the communication progress mode changed with operations in flight");
    }
  }
  if (mode == CommProgress::kThread) {
    engine_->start_thread();
  } else {
    engine_->stop_thread();
  }
  mode_ = mode;
}

namespace {

// Bytes one rank sends in a ring algorithm: an all-reduce is a reduce-scatter then an
// all-gather, each moving (N-1)/N of the buffer.
double ring_bytes(double total_bytes, int ranks) {
  return ranks > 1 ? total_bytes * (ranks - 1) / ranks : 0.0;
}

}  // namespace

Comm::OpId Comm::queue(CommOp* raw) {
  std::unique_ptr<CommOp> op(raw);
  op->queued_at = Clock::now();
  std::lock_guard<std::mutex> lock(engine_->mutex);
  const OpId id = engine_->next_id++;
  engine_->stats.operations += 1;
  engine_->stats.bytes_sent += op->bytes_sent;
  if (engine_->in_flight++ == 0) engine_->busy_since = op->queued_at;
  engine_->to_start.push_back(op.get());
  engine_->ops.emplace(id, std::move(op));
  if (mode_ == CommProgress::kThread) {
    engine_->work.notify_one();
  } else {
    engine_->step();  // start it now: nothing else would until the next progress() or wait()
  }
  return id;
}

Comm::OpId Comm::start_allreduce_sum(std::span<float> data, std::string what) {
  if (!engine_) return 0;
  auto* op = new CommOp;
  op->kind = CommOp::Kind::kAllreduce;
  op->what = std::move(what);
  op->data = data.data();
  op->count = count_as_int(data.size(), op->what);
  op->bytes_sent = 2 * ring_bytes(4.0 * static_cast<double>(data.size()), size_);
  return queue(op);
}

Comm::OpId Comm::start_reduce_scatter_sum(std::span<const float> send, std::span<float> recv,
                                          std::vector<int> counts, std::string what) {
  if (counts.size() != static_cast<size_t>(size_) ||
      recv.size() != static_cast<size_t>(counts[static_cast<size_t>(rank_)])) {
    throw Error("internal: " + what + ": reduce-scatter counts do not match the world or recv");
  }
  int64_t total = 0;
  for (int c : counts) total += c;
  if (static_cast<size_t>(total) != send.size()) {
    throw Error("internal: " + what + ": reduce-scatter counts do not add up to the send buffer");
  }
  if (!engine_) {
    std::copy(send.begin(), send.end(), recv.begin());
    return 0;
  }
  auto* op = new CommOp;
  op->kind = CommOp::Kind::kReduceScatter;
  op->what = std::move(what);
  op->send = send.data();
  op->data = recv.data();
  op->counts = std::move(counts);
  op->bytes_sent = ring_bytes(4.0 * static_cast<double>(total), size_);
  return queue(op);
}

Comm::OpId Comm::start_allgather(std::span<const float> mine, std::span<float> all,
                                 std::vector<int> counts, std::string what) {
  return start_allgather_typed(mine.data(), mine.size(), all.data(), all.size(), sizeof(float),
                               std::move(counts), std::move(what));
}

Comm::OpId Comm::start_allgather_bytes(std::span<const uint8_t> mine, std::span<uint8_t> all,
                                       std::vector<int> counts, std::string what) {
  return start_allgather_typed(mine.data(), mine.size(), all.data(), all.size(), 1,
                               std::move(counts), std::move(what));
}

Comm::OpId Comm::start_allgather_typed(const void* mine, size_t mine_count, void* all,
                                       size_t all_count, size_t element_bytes,
                                       std::vector<int> counts, std::string what) {
  if (counts.size() != static_cast<size_t>(size_) ||
      mine_count != static_cast<size_t>(counts[static_cast<size_t>(rank_)])) {
    throw Error("internal: " + what + ": all-gather counts do not match the world or the input");
  }
  std::vector<int> displs(counts.size());
  int64_t total = 0;
  for (size_t r = 0; r < counts.size(); ++r) {
    displs[r] = count_as_int(static_cast<size_t>(total), what);
    total += counts[r];
  }
  if (static_cast<size_t>(total) != all_count) {
    throw Error("internal: " + what + ": all-gather counts do not add up to the output");
  }
  if (!engine_) {
    if (mine_count > 0) std::memcpy(all, mine, mine_count * element_bytes);
    return 0;
  }
  auto* op = new CommOp;
  op->kind = CommOp::Kind::kAllgather;
  op->what = std::move(what);
  op->send = mine;
  op->data = all;
  op->count = static_cast<int>(mine_count);
  op->counts = std::move(counts);
  op->displs = std::move(displs);
  op->type = element_bytes == 1 ? MPI_BYTE : MPI_FLOAT;
  op->bytes_sent =
      ring_bytes(static_cast<double>(element_bytes) * static_cast<double>(total), size_);
  return queue(op);
}

Comm::OpId Comm::start_broadcast(std::span<std::byte> data, int root, std::string what) {
  if (!engine_) return 0;
  auto* op = new CommOp;
  op->kind = CommOp::Kind::kBroadcast;
  op->what = std::move(what);
  op->data = data.data();
  op->count = count_as_int(data.size(), op->what);
  op->type = MPI_BYTE;
  op->root = root;
  op->bytes_sent = rank_ == root ? static_cast<double>(data.size()) : 0.0;
  return queue(op);
}

void Comm::progress() {
  if (!engine_ || mode_ == CommProgress::kThread) return;
  std::lock_guard<std::mutex> lock(engine_->mutex);
  if (!engine_->to_start.empty() || !engine_->running.empty()) engine_->step();
}

std::string Comm::wait_name(OpId id) {
  std::lock_guard<std::mutex> lock(engine_->mutex);
  auto it = engine_->ops.find(id);
  return it == engine_->ops.end() ? "wait" : "wait: " + it->second->what;
}

void Comm::wait(OpId id) {
  if (!engine_ || id == 0) return;
  // What the caller waits for is communication the compute did not hide: the profiler's
  // comm_wait time, the exposed part.
  ProfileScope scope("comm_wait", Profiler::enabled() ? wait_name(id) : std::string(), {}, 0, 0);
  const Clock::time_point begin = Clock::now();
  Engine& e = *engine_;
  std::unique_lock<std::mutex> lock(e.mutex);
  auto it = e.ops.find(id);
  if (it == e.ops.end()) throw Error("internal: waiting for an unknown communication operation");
  CommOp* op = it->second.get();
  while (!op->done) {
    if (seconds_since(begin) > timeout_s_) {
      std::fprintf(stderr,
                   "nanogpt: %s: waited %.0f s for the other ranks in '%s'; one of them is dead "
                   "or hung (NANOGPT_COMM_TIMEOUT=%.0f s). Ending the job.\n",
                   where().c_str(), seconds_since(begin), op->what.c_str(), timeout_s_);
      abort_job(3);  // holding the mutex: the communication thread is outside MPI
    }
    if (mode_ == CommProgress::kThread) {
      e.done.wait_for(lock, std::chrono::milliseconds(200));
    } else {
      if (!e.step()) {
        lock.unlock();
        std::this_thread::yield();
        lock.lock();
      }
    }
  }
  if (!e.error.empty()) throw Error(e.error);
  e.stats.waited_s += seconds_since(begin);
  e.ops.erase(it);
}

void Comm::wait_all() {
  if (!engine_) return;
  std::vector<OpId> ids;
  {
    std::lock_guard<std::mutex> lock(engine_->mutex);
    for (const auto& [id, op] : engine_->ops) ids.push_back(id);
  }
  for (OpId id : ids) wait(id);
}

double Comm::sum(double value, const std::string& what) {
  sum_in_place(std::span<double>(&value, 1), what);
  return value;
}

void Comm::sum_in_place(std::span<double> values, const std::string& what) {
  if (!engine_) return;
  auto* op = new CommOp;
  op->kind = CommOp::Kind::kAllreduce;
  op->what = what;
  op->data = values.data();
  op->count = count_as_int(values.size(), what);
  op->type = MPI_DOUBLE;
  op->bytes_sent = 2 * ring_bytes(8.0 * static_cast<double>(values.size()), size_);
  wait(queue(op));
}

int64_t Comm::max(int64_t value, const std::string& what) {
  if (!engine_) return value;
  auto* op = new CommOp;
  op->kind = CommOp::Kind::kAllreduce;
  op->what = what;
  op->data = &value;
  op->count = 1;
  op->type = MPI_INT64_T;
  op->reduce = MPI_MAX;
  op->bytes_sent = 2 * ring_bytes(8.0, size_);
  wait(queue(op));
  return value;
}

std::vector<std::string> Comm::allgather_strings(const std::string& mine, const std::string& what) {
  if (!engine_) return {mine};
  std::vector<int> lengths(static_cast<size_t>(size_));
  int my_length = count_as_int(mine.size(), what);
  {
    auto* op = new CommOp;
    op->kind = CommOp::Kind::kAllgather;
    op->what = what + " (lengths)";
    op->send = &my_length;
    op->data = lengths.data();
    op->count = 1;
    op->counts.assign(static_cast<size_t>(size_), 1);
    op->displs.resize(static_cast<size_t>(size_));
    for (int r = 0; r < size_; ++r) op->displs[static_cast<size_t>(r)] = r;
    op->type = MPI_INT;
    wait(queue(op));
  }
  std::vector<int> displs(static_cast<size_t>(size_));
  size_t total = 0;
  for (size_t r = 0; r < lengths.size(); ++r) {
    displs[r] = count_as_int(total, what);
    total += static_cast<size_t>(lengths[r]);
  }
  std::string all(total, '\0');
  {
    auto* op = new CommOp;
    op->kind = CommOp::Kind::kAllgather;
    op->what = what;
    op->send = mine.data();
    op->data = all.data();
    op->count = my_length;
    op->counts = lengths;
    op->displs = displs;
    op->type = MPI_CHAR;
    op->bytes_sent = ring_bytes(static_cast<double>(total), size_);
    wait(queue(op));
  }
  std::vector<std::string> out;
  for (size_t r = 0; r < lengths.size(); ++r) {
    out.push_back(all.substr(static_cast<size_t>(displs[r]), static_cast<size_t>(lengths[r])));
  }
  return out;
}

void Comm::barrier(const std::string& what) {
  max(0, what);
}

CommStats Comm::stats() const {
  if (!engine_) return {};
  std::lock_guard<std::mutex> lock(engine_->mutex);
  return engine_->stats;
}

void Comm::reset_stats() {
  if (!engine_) return;
  std::lock_guard<std::mutex> lock(engine_->mutex);
  engine_->stats = {};
}

}  // namespace nanogpt
