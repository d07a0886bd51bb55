#include "runtime/profiler.hpp"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <limits>
#include <mutex>
#include <unordered_map>
#include <utility>
#include <vector>

#include "runtime/build_info.hpp"
#include "runtime/error.hpp"
#include "runtime/file_io.hpp"

namespace nanogpt {

namespace profiler_internal {
std::atomic<bool> g_enabled{false};
}  // namespace profiler_internal

namespace {

constexpr int kMaxDims = 6;

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// A scope that has begun and not ended, on its thread's stack. Entries are reused, so once
// the stack has reached its depth, beginning a scope allocates nothing unless the name grows.
struct OpenScope {
  const char* op_type = nullptr;
  std::string name;
  int64_t shape[kMaxDims] = {};
  int ndim = 0;
  double flops = 0, bytes = 0;
  int64_t start_ns = 0;
  int64_t child_ns = 0;  // summed durations of the scopes nested directly inside
};

struct ThreadState {
  uint32_t tid = 0;  // 1, 2, ... in order of first use; 0 until then
  std::vector<OpenScope> stack;
  size_t depth = 0;
};

thread_local ThreadState t_state;
std::atomic<uint32_t> g_next_tid{1};

// Compact on purpose: a long run keeps millions of these. Names and op types are interned.
struct Event {
  int64_t start_ns, dur_ns;
  double flops, bytes;
  int64_t shape[kMaxDims];
  uint32_t name_id, tid;
  uint16_t op_id;
  uint8_t ndim, depth;
};

struct Totals {
  int64_t self_ns = 0, total_ns = 0, count = 0;
  double flops = 0, bytes = 0;
};

struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};

class Interner {
 public:
  uint32_t id(std::string_view s) {
    auto it = index_.find(s);
    if (it != index_.end()) return it->second;
    const auto id = static_cast<uint32_t>(strings_.size());
    strings_.emplace_back(s);
    index_.emplace(strings_.back(), id);
    return id;
  }
  const std::string& operator[](uint32_t id) const { return strings_[id]; }
  size_t size() const { return strings_.size(); }
  void clear() {
    strings_.clear();
    index_.clear();
  }

 private:
  std::vector<std::string> strings_;
  std::unordered_map<std::string, uint32_t, StringHash, std::equal_to<>> index_;
};

// Everything recorded, behind one mutex: an event costs one uncontended lock on the thread that
// ends the scope, small next to any operation worth a scope.
// Named tracks get thread ids far above any pool's.
constexpr uint32_t kFirstTrackTid = 100000;

struct Store {
  std::mutex mutex;
  int64_t origin_ns = 0, stop_ns = 0;
  size_t limit = Profiler::kDefaultEventLimit;
  size_t dropped = 0;
  std::vector<Event> events;
  Interner names, op_types;
  std::vector<Totals> by_op;                           // indexed by op id
  std::vector<std::pair<uint16_t, Totals>> by_name;    // indexed by name id: (op id, totals)
  std::unordered_map<uint32_t, int64_t> top_level_ns;  // per thread: time in outermost scopes
  uint32_t max_tid = 0;
  std::vector<std::string> tracks;  // record_interval's; track i is tid kFirstTrackTid + i

  void clear() {
    events.clear();
    events.shrink_to_fit();
    names.clear();
    op_types.clear();
    by_op.clear();
    by_name.clear();
    top_level_ns.clear();
    dropped = 0;
    max_tid = 0;
    tracks.clear();
  }
};

Store& store() {
  static Store s;
  return s;
}

void add(Totals& t, int64_t self_ns, int64_t dur_ns, double flops, double bytes) {
  t.self_ns += self_ns;
  t.total_ns += dur_ns;
  t.count += 1;
  t.flops += flops;
  t.bytes += bytes;
}

void append_json_string(std::string& out, std::string_view s) {
  out += '"';
  for (char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += ch;
    } else if (c < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      out += buf;
    } else {
      out += ch;
    }
  }
  out += '"';
}

void append_number(std::string& out, const char* format, double v) {
  char buf[40];
  std::snprintf(buf, sizeof buf, format, v);
  out += buf;
}

std::string format_table_row(const std::string& label, double share, int64_t count, double self_ms,
                             double total_ms, double flops, double bytes, double self_s) {
  auto rate = [&](double amount) {
    char b[24];
    if (amount <= 0 || self_s <= 0) return std::string("-");
    std::snprintf(b, sizeof b, "%.2f", amount / self_s / 1e9);
    return std::string(b);
  };
  char line[256];
  std::snprintf(line, sizeof line, "%-28s %6.1f%% %9lld %11.2f %11.2f %9s %9s\n",
                label.substr(0, 28).c_str(), share, static_cast<long long>(count), self_ms,
                total_ms, rate(flops).c_str(), rate(bytes).c_str());
  return line;
}

}  // namespace

void Profiler::start() {
  Store& s = store();
  {
    std::lock_guard<std::mutex> lock(s.mutex);
    s.clear();
    s.origin_ns = now_ns();
    s.stop_ns = 0;
  }
  profiler_internal::g_enabled.store(true, std::memory_order_relaxed);
}

void Profiler::stop() {
  if (!enabled()) return;
  profiler_internal::g_enabled.store(false, std::memory_order_relaxed);
  Store& s = store();
  std::lock_guard<std::mutex> lock(s.mutex);
  s.stop_ns = now_ns();
}

void Profiler::set_event_limit(size_t limit) {
  Store& s = store();
  std::lock_guard<std::mutex> lock(s.mutex);
  s.limit = limit;
}

size_t Profiler::recorded_events() {
  Store& s = store();
  std::lock_guard<std::mutex> lock(s.mutex);
  return s.events.size();
}

size_t Profiler::dropped_events() {
  Store& s = store();
  std::lock_guard<std::mutex> lock(s.mutex);
  return s.dropped;
}

void Profiler::record_interval(const char* op_type, std::string_view name, std::string_view track,
                               int64_t start_ns, int64_t end_ns, double bytes) {
  if (!enabled()) return;
  Store& s = store();
  std::lock_guard<std::mutex> lock(s.mutex);
  if (s.events.size() >= s.limit) {
    ++s.dropped;
    return;
  }
  auto it = std::find(s.tracks.begin(), s.tracks.end(), track);
  if (it == s.tracks.end()) it = s.tracks.insert(s.tracks.end(), std::string(track));
  Event e{};
  e.start_ns = start_ns;
  e.dur_ns = std::max<int64_t>(0, end_ns - start_ns);
  e.bytes = bytes;
  e.name_id = s.names.id(name);
  e.op_id = static_cast<uint16_t>(s.op_types.id(op_type));
  e.tid = kFirstTrackTid + static_cast<uint32_t>(it - s.tracks.begin());
  s.events.push_back(e);
}

void ProfileScope::begin(const char* op_type, std::string_view name,
                         std::initializer_list<int64_t> shape, double flops, double bytes) {
  ThreadState& ts = t_state;
  if (ts.tid == 0) ts.tid = g_next_tid.fetch_add(1, std::memory_order_relaxed);
  if (ts.depth == ts.stack.size()) ts.stack.emplace_back();
  OpenScope& o = ts.stack[ts.depth++];
  o.op_type = op_type;
  o.name.assign(name);
  o.ndim = 0;
  for (int64_t v : shape) {
    if (o.ndim == kMaxDims) break;
    o.shape[o.ndim++] = v;
  }
  o.flops = flops;
  o.bytes = bytes;
  o.child_ns = 0;
  active_ = true;
  o.start_ns = now_ns();  // last, so the bookkeeping above is not timed
}

void ProfileScope::end() {
  const int64_t end_ns = now_ns();
  ThreadState& ts = t_state;
  OpenScope& o = ts.stack[--ts.depth];
  const int64_t dur = end_ns - o.start_ns;
  const int64_t self = std::max<int64_t>(0, dur - o.child_ns);
  if (ts.depth > 0) ts.stack[ts.depth - 1].child_ns += dur;

  Store& s = store();
  std::lock_guard<std::mutex> lock(s.mutex);
  const uint32_t op = s.op_types.id(o.op_type);
  const uint32_t name = s.names.id(o.name);
  if (s.by_op.size() <= op) s.by_op.resize(op + 1);
  if (s.by_name.size() <= name) s.by_name.resize(name + 1);
  add(s.by_op[op], self, dur, o.flops, o.bytes);
  s.by_name[name].first = static_cast<uint16_t>(op);
  add(s.by_name[name].second, self, dur, o.flops, o.bytes);
  if (ts.depth == 0) s.top_level_ns[ts.tid] += dur;
  s.max_tid = std::max(s.max_tid, ts.tid);
  if (s.events.size() >= s.limit) {
    ++s.dropped;
    return;
  }
  Event e{};
  e.start_ns = o.start_ns;
  e.dur_ns = dur;
  e.flops = o.flops;
  e.bytes = o.bytes;
  std::copy(o.shape, o.shape + o.ndim, e.shape);
  e.name_id = name;
  e.tid = ts.tid;
  e.op_id = static_cast<uint16_t>(op);
  e.ndim = static_cast<uint8_t>(o.ndim);
  e.depth = static_cast<uint8_t>(std::min<size_t>(ts.depth, 255));
  s.events.push_back(e);
}

void Profiler::write_chrome_trace(const std::string& path) {
  Store& s = store();
  std::lock_guard<std::mutex> lock(s.mutex);
  AtomicFileWriter out(path);
  std::string buf;
  buf.reserve(1 << 20);
  auto flush_if_full = [&] {
    if (buf.size() >= (1u << 20)) {
      out.write(buf.data(), buf.size());
      buf.clear();
    }
  };
  buf += "{\"displayTimeUnit\":\"ms\",\"otherData\":{\"producer\":\"nanogpt " NANOGPT_VERSION " (";
  buf += build_revision();
  buf += ")\",\"dropped_events\":";
  buf += std::to_string(s.dropped);
  buf += "},\"traceEvents\":[\n";
  buf += R"({"name":"process_name","ph":"M","pid":1,"tid":0,"args":{"name":"nanogpt"}})";
  for (uint32_t tid = 1; tid <= s.max_tid; ++tid) {
    buf += ",\n{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":1,\"tid\":" + std::to_string(tid) +
           ",\"args\":{\"name\":\"thread " + std::to_string(tid) + "\"}}";
  }
  for (size_t i = 0; i < s.tracks.size(); ++i) {
    buf += ",\n{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":1,\"tid\":" +
           std::to_string(kFirstTrackTid + i) + ",\"args\":{\"name\":";
    append_json_string(buf, s.tracks[i]);
    buf += "}}";
  }
  for (const Event& e : s.events) {
    const std::string& op = s.op_types[e.op_id];
    buf += ",\n{\"name\":";
    append_json_string(buf, s.names[e.name_id]);
    buf += ",\"cat\":";
    append_json_string(buf, op);
    buf += ",\"ph\":\"X\",\"pid\":1,\"tid\":";
    buf += std::to_string(e.tid);
    buf += ",\"ts\":";
    append_number(buf, "%.3f", static_cast<double>(e.start_ns - s.origin_ns) / 1e3);
    buf += ",\"dur\":";
    append_number(buf, "%.3f", static_cast<double>(e.dur_ns) / 1e3);
    buf += ",\"args\":{\"op_type\":";
    append_json_string(buf, op);
    buf += ",\"shape\":[";
    for (int d = 0; d < e.ndim; ++d) {
      if (d > 0) buf += ',';
      buf += std::to_string(e.shape[d]);
    }
    buf += "],\"flops\":";
    append_number(buf, "%.15g", e.flops);
    buf += ",\"bytes\":";
    append_number(buf, "%.15g", e.bytes);
    buf += "}}";
    flush_if_full();
  }
  buf += "\n]}\n";
  out.write(buf.data(), buf.size());
  out.commit();
}

std::string Profiler::summary_table() {
  Store& s = store();
  std::lock_guard<std::mutex> lock(s.mutex);
  const int64_t end = s.stop_ns != 0 ? s.stop_ns : now_ns();
  const double wall_s = s.origin_ns == 0 ? 0.0 : static_cast<double>(end - s.origin_ns) / 1e9;
  int64_t covered_ns = 0;
  for (const auto& [tid, ns] : s.top_level_ns) covered_ns = std::max(covered_ns, ns);
  Totals all;
  for (const Totals& t : s.by_op) {
    all.self_ns += t.self_ns;
    all.count += t.count;
    all.flops += t.flops;
    all.bytes += t.bytes;
  }
  all.total_ns = covered_ns;

  std::string out;
  char line[256];
  std::snprintf(line, sizeof line,
                "profile: %lld events over %.3f s; scopes cover %.1f%% of it. Shares are of self "
                "time (a scope's time minus its nested scopes'); rates are per self second.\n",
                static_cast<long long>(all.count), wall_s,
                wall_s > 0 ? 100.0 * static_cast<double>(covered_ns) / 1e9 / wall_s : 0.0);
  out += line;
  std::snprintf(line, sizeof line, "%-28s %7s %9s %11s %11s %9s %9s\n", "op type", "time", "count",
                "self ms", "total ms", "GFLOP/s", "GB/s");
  out += line;
  const double all_self = static_cast<double>(all.self_ns);
  auto row = [&](const std::string& label, const Totals& t) {
    return format_table_row(
        label, all_self > 0 ? 100.0 * static_cast<double>(t.self_ns) / all_self : 0.0, t.count,
        static_cast<double>(t.self_ns) / 1e6, static_cast<double>(t.total_ns) / 1e6, t.flops,
        t.bytes, static_cast<double>(t.self_ns) / 1e9);
  };
  std::vector<uint32_t> ops(s.by_op.size());
  for (uint32_t i = 0; i < ops.size(); ++i) ops[i] = i;
  std::stable_sort(ops.begin(), ops.end(),
                   [&](uint32_t a, uint32_t b) { return s.by_op[a].self_ns > s.by_op[b].self_ns; });
  // Op types only intervals used (record_interval) have no scopes: no row.
  for (uint32_t op : ops) {
    if (s.by_op[op].count > 0) out += row(s.op_types[op], s.by_op[op]);
  }
  out += row("all", all);  // its total: time in outermost scopes

  constexpr size_t kTopNames = 15;
  std::vector<uint32_t> names(s.by_name.size());
  for (uint32_t i = 0; i < names.size(); ++i) names[i] = i;
  std::stable_sort(names.begin(), names.end(), [&](uint32_t a, uint32_t b) {
    return s.by_name[a].second.self_ns > s.by_name[b].second.self_ns;
  });
  if (names.size() > kTopNames) names.resize(kTopNames);
  if (!names.empty()) {
    std::snprintf(line, sizeof line, "\n%-28s %7s %9s %11s %11s %9s %9s  %s\n", "top names", "time",
                  "count", "self ms", "total ms", "GFLOP/s", "GB/s", "op type");
    out += line;
    for (uint32_t n : names) {
      if (s.by_name[n].second.count == 0) continue;
      std::string r = row(s.names[n], s.by_name[n].second);
      r.pop_back();
      out += r + "  " + s.op_types[s.by_name[n].first] + "\n";
    }
  }
  // Scopes opened on several threads (operations run as pool tasks, such as Muon's matrices)
  // each count their own thread's time, so self times can add up to more than the wall clock;
  // say so rather than let a share read as a share of the step.
  if (static_cast<double>(all.self_ns) > 1.01 * static_cast<double>(covered_ns)) {
    std::snprintf(line, sizeof line,
                  "note: scopes ran on several threads (pool tasks): self times add up to %.2f ms "
                  "of thread time, the busiest thread's scopes to %.2f ms, so shares are of "
                  "thread time, not wall time\n",
                  static_cast<double>(all.self_ns) / 1e6, static_cast<double>(covered_ns) / 1e6);
    out += line;
  }
  // Tracks (record_interval): the wall time with something in flight on each, the union of its
  // intervals. For the communication track, the part the threads waited for is the self time
  // of their comm_wait scopes (exposed); the rest ran while they computed (hidden).
  for (size_t t = 0; t < s.tracks.size(); ++t) {
    std::vector<std::pair<int64_t, int64_t>> spans;
    for (const Event& e : s.events) {
      if (e.tid == kFirstTrackTid + t) spans.emplace_back(e.start_ns, e.start_ns + e.dur_ns);
    }
    std::sort(spans.begin(), spans.end());
    int64_t busy = 0, open_end = std::numeric_limits<int64_t>::min();
    for (const auto& [b, e] : spans) {
      busy += std::max<int64_t>(0, e - std::max(b, open_end));
      open_end = std::max(open_end, e);
    }
    std::snprintf(line, sizeof line, "\ntrack '%s': %zu intervals, %.2f ms with one in flight",
                  s.tracks[t].c_str(), spans.size(), static_cast<double>(busy) / 1e6);
    out += line;
    if (s.tracks[t] == "communication") {
      int64_t exposed = 0;
      for (uint32_t op = 0; op < s.by_op.size(); ++op) {
        if (s.op_types[op] == "comm_wait") exposed = s.by_op[op].self_ns;
      }
      std::snprintf(line, sizeof line, ": %.2f ms exposed (comm_wait), %.2f ms hidden",
                    static_cast<double>(exposed) / 1e6,
                    static_cast<double>(std::max<int64_t>(0, busy - exposed)) / 1e6);
      out += line;
    }
    out += "\n";
  }
  if (s.dropped > 0) {
    std::snprintf(line, sizeof line,
                  "note: the trace holds the first %zu events; %zu later ones are counted above "
                  "but not in the trace (the limit bounds memory)\n",
                  s.events.size(), s.dropped);
    out += line;
  }
  return out;
}

ProfileSession::ProfileSession(std::string path, bool start_now) : path_(std::move(path)) {
  if (path_.empty()) return;
  const std::filesystem::path parent = std::filesystem::path(path_).parent_path();
  std::error_code ec;
  if (!parent.empty() && !std::filesystem::is_directory(parent, ec)) {
    throw InputError("--profile " + path_ + ": directory '" + parent.string() +
                     "' does not exist; create it or give another path");
  }
  const std::string dir = parent.empty() ? "." : parent.string();
  if (::access(dir.c_str(), W_OK) != 0) {
    throw InputError("--profile " + path_ + ": directory '" + dir +
                     "' is not writable; give a path in a directory you can write");
  }
  if (std::filesystem::is_directory(path_, ec)) {
    throw InputError("--profile " + path_ + " is a directory; give a file name such as " +
                     (std::filesystem::path(path_) / "profile.json").string());
  }
  if (start_now) start();
}

void ProfileSession::start() {
  if (path_.empty() || active_) return;
  Profiler::start();
  active_ = true;
}

ProfileSession::~ProfileSession() {
  if (active_) Profiler::stop();
}

void ProfileSession::finish() {
  if (!active_) return;
  active_ = false;
  Profiler::stop();
  // The table first: it survives a trace that cannot be written.
  std::fprintf(stderr, "%s", Profiler::summary_table().c_str());
  Profiler::write_chrome_trace(path_);
  std::fprintf(stderr, "profile written to %s (open in https://ui.perfetto.dev)\n", path_.c_str());
}

}  // namespace nanogpt
