// The profiler: nothing recorded when off, nesting and self time, the Chrome trace format, the
// table, the event bound and concurrent threads. Never asserts durations, only their order.
#include <gtest/gtest.h>

#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "runtime/error.hpp"
#include "runtime/file_io.hpp"
#include "runtime/profiler.hpp"
#include "runtime/thread_pool.hpp"
#include "support/fixtures.hpp"

namespace nanogpt {
namespace {

// Leaves the profiler off and at its default bound whatever a test does.
class ProfilerTest : public ::testing::Test {
 protected:
  void TearDown() override {
    Profiler::stop();
    Profiler::set_event_limit(Profiler::kDefaultEventLimit);
  }
};

void busy(int iterations) {
  volatile double x = 0;
  for (int i = 0; i < iterations; ++i) x = x + 1e-9 * i;
}

nlohmann::json trace_of(const TempDir& dir) {
  Profiler::write_chrome_trace(dir.path() + "/trace.json");
  return nlohmann::json::parse(read_file(dir.path() + "/trace.json"));
}

std::vector<nlohmann::json> complete_events(const nlohmann::json& trace) {
  std::vector<nlohmann::json> out;
  for (const auto& e : trace.at("traceEvents")) {
    if (e.at("ph") == "X") out.push_back(e);
  }
  return out;
}

TEST_F(ProfilerTest, RecordsNothingWhenOff) {
  Profiler::start();
  Profiler::stop();
  EXPECT_FALSE(Profiler::enabled());
  { ProfileScope s("gemm", "off", {1, 2, 3}, 6, 24); }
  EXPECT_EQ(Profiler::recorded_events(), 0u);
  TempDir dir;
  EXPECT_TRUE(complete_events(trace_of(dir)).empty());
}

TEST_F(ProfilerTest, NestedScopesInTheTraceWithTheirArgs) {
  Profiler::start();
  EXPECT_TRUE(Profiler::enabled());
  {
    ProfileScope step("train_step", "train_step", {4096}, 0, 0);
    busy(10000);
    {
      // A temporary name: the scope copies it.
      ProfileScope op("gemm", std::string("blocks.0.mlp.c_fc") + ".fwd", {512, 1024, 256},
                      2.0 * 512 * 1024 * 256, 4.0 * (512 * 256 + 1024 * 256 + 512 * 1024));
      busy(10000);
    }
    ProfileScope quoted("elementwise", "a \"quoted\"\\name\n", {7}, 7, 56);
  }
  Profiler::stop();
  EXPECT_EQ(Profiler::recorded_events(), 3u);
  TempDir dir;
  const nlohmann::json trace = trace_of(dir);
  const auto events = complete_events(trace);
  ASSERT_EQ(events.size(), 3u);
  const nlohmann::json *step = nullptr, *op = nullptr, *quoted = nullptr;
  for (const auto& e : events) {
    if (e["name"] == "train_step") step = &e;
    if (e["name"] == "blocks.0.mlp.c_fc.fwd") op = &e;
    if (e["name"] == "a \"quoted\"\\name\n") quoted = &e;
  }
  ASSERT_TRUE(step && op && quoted) << trace.dump(1);
  EXPECT_EQ((*op)["cat"], "gemm");
  EXPECT_EQ((*op)["args"]["op_type"], "gemm");
  EXPECT_EQ((*op)["args"]["shape"], nlohmann::json({512, 1024, 256}));
  EXPECT_EQ((*op)["args"]["flops"].get<double>(), 2.0 * 512 * 1024 * 256);
  EXPECT_GT((*op)["args"]["bytes"].get<double>(), 0);
  EXPECT_EQ((*op)["tid"], (*step)["tid"]);
  // The child lies within its parent.
  const double s0 = (*step)["ts"].get<double>(), s1 = s0 + (*step)["dur"].get<double>();
  const double o0 = (*op)["ts"].get<double>(), o1 = o0 + (*op)["dur"].get<double>();
  EXPECT_LE(s0, o0);
  EXPECT_LE(o1, s1 + 0.002);  // printed to the nanosecond
  EXPECT_GE((*op)["dur"].get<double>(), 0);
  bool named_thread = false;
  for (const auto& e : trace["traceEvents"]) {
    if (e["ph"] == "M" && e["name"] == "thread_name" && e["tid"] == (*step)["tid"]) {
      named_thread = true;
    }
  }
  EXPECT_TRUE(named_thread);
}

// Rows "name  share%  count  self  total  gflops  gbs" of the op-type section.
struct Row {
  double share;
  long count;
  double self_ms, total_ms;
  std::string gflops;
};
std::map<std::string, Row> op_rows(const std::string& table) {
  std::map<std::string, Row> rows;
  std::istringstream in(table);
  std::string line;
  std::getline(in, line);  // summary
  std::getline(in, line);  // header
  while (std::getline(in, line) && !line.empty()) {
    std::istringstream l(line);
    std::string name, share, gbs;
    Row r{};
    l >> name >> share >> r.count >> r.self_ms >> r.total_ms >> r.gflops >> gbs;
    r.share = std::stod(share);
    rows[name] = r;
  }
  return rows;
}

TEST_F(ProfilerTest, TableChargesSelfTimeSoSharesAddUp) {
  Profiler::start();
  for (int i = 0; i < 3; ++i) {
    ProfileScope step("train_step", "train_step", {}, 0, 0);
    busy(20000);
    for (int j = 0; j < 2; ++j) {
      ProfileScope op("gemm", "blocks.0.attn.qkv.fwd", {64, 64, 64}, 2.0 * 64 * 64 * 64, 0);
      busy(20000);
    }
    ProfileScope other("rmsnorm", "norm", {64}, 0, 1024);
    busy(1000);
  }
  Profiler::stop();
  const std::string table = Profiler::summary_table();
  const auto rows = op_rows(table);
  ASSERT_EQ(rows.size(), 4u) << table;  // three op types and "all"
  EXPECT_EQ(rows.at("train_step").count, 3);
  EXPECT_EQ(rows.at("gemm").count, 6);
  EXPECT_EQ(rows.at("rmsnorm").count, 3);
  EXPECT_EQ(rows.at("all").count, 12);
  EXPECT_NEAR(rows.at("all").share, 100.0, 1e-9);
  EXPECT_NEAR(rows.at("train_step").share + rows.at("gemm").share + rows.at("rmsnorm").share, 100.0,
              0.2)
      << table;
  // The parent's self time excludes its children; leaves' self time is their total.
  EXPECT_LT(rows.at("train_step").self_ms, rows.at("train_step").total_ms);
  EXPECT_NEAR(rows.at("gemm").self_ms, rows.at("gemm").total_ms, 0.011);
  EXPECT_NE(rows.at("gemm").gflops, "-");
  EXPECT_EQ(rows.at("train_step").gflops, "-");  // no work of its own
  EXPECT_NE(table.find("blocks.0.attn.qkv.fwd"), std::string::npos) << "top names";
  EXPECT_EQ(table.find("note:"), std::string::npos);
}

TEST_F(ProfilerTest, StartClearsThePreviousSession) {
  Profiler::start();
  { ProfileScope s("gemm", "first", {}, 0, 0); }
  Profiler::start();
  { ProfileScope s("adam", "second", {}, 0, 0); }
  Profiler::stop();
  EXPECT_EQ(Profiler::recorded_events(), 1u);
  const std::string table = Profiler::summary_table();
  EXPECT_EQ(table.find("first"), std::string::npos) << table;
  EXPECT_NE(table.find("second"), std::string::npos) << table;
}

TEST_F(ProfilerTest, EventBoundKeepsTheTableComplete) {
  Profiler::start();
  Profiler::set_event_limit(10);
  for (int i = 0; i < 25; ++i) ProfileScope s("elementwise", "x", {i}, 1, 1);
  Profiler::stop();
  EXPECT_EQ(Profiler::recorded_events(), 10u);
  EXPECT_EQ(Profiler::dropped_events(), 15u);
  const std::string table = Profiler::summary_table();
  EXPECT_EQ(op_rows(table).at("elementwise").count, 25);
  EXPECT_NE(table.find("first 10 events; 15 later"), std::string::npos) << table;
  TempDir dir;
  const nlohmann::json trace = trace_of(dir);
  EXPECT_EQ(complete_events(trace).size(), 10u);
  EXPECT_EQ(trace["otherData"]["dropped_events"], 15);
}

TEST_F(ProfilerTest, ThreadsRecordConcurrently) {
  Profiler::start();
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([] {
      for (int i = 0; i < 500; ++i) {
        ProfileScope outer("train_step", "outer", {}, 0, 0);
        ProfileScope inner("gemm", "inner", {i}, 10, 10);
      }
    });
  }
  for (auto& th : threads) th.join();
  Profiler::stop();
  EXPECT_EQ(Profiler::recorded_events(), 4000u);
  TempDir dir;
  std::set<int> tids;
  for (const auto& e : complete_events(trace_of(dir))) tids.insert(e["tid"].get<int>());
  EXPECT_EQ(tids.size(), 4u);
  const std::string table = Profiler::summary_table();
  EXPECT_EQ(op_rows(table).at("gemm").count, 2000);
  // Four threads' scopes: the table says its shares are of thread time.
  EXPECT_NE(table.find("note: scopes ran on several threads"), std::string::npos) << table;
}

TEST_F(ProfilerTest, ScopesInsidePoolTasks) {
  // Operations run as pool tasks (Muon's matrices): each task's scopes belong to the worker
  // that ran it, nest under whatever that thread had open, and are all counted. Twice, so the
  // workers' per-thread state is reused across jobs.
  ThreadPool pool(3);
  Profiler::start();
  for (int rep = 0; rep < 2; ++rep) {
    ProfileScope outer("optimizer", "outer", {}, 0, 0);
    pool.parallel_for(12, [](size_t task, int) {
      ProfileScope op("muon", "task", {static_cast<int64_t>(task)}, 0, 0);
      ProfileScope inner("newton_schulz", "inner", {}, 1000, 0);
      busy(20000);
    });
  }
  Profiler::stop();
  EXPECT_EQ(Profiler::recorded_events(), 2u + 2 * 12 * 2);
  TempDir dir;
  std::vector<std::pair<double, double>> outers;  // [start, end] in µs
  std::set<int> tids;
  const auto events = complete_events(trace_of(dir));
  for (const auto& e : events) {
    if (e["name"] == "outer") {
      outers.emplace_back(e["ts"].get<double>(), e["ts"].get<double>() + e["dur"].get<double>());
    }
  }
  ASSERT_EQ(outers.size(), 2u);
  for (const auto& e : events) {
    if (e["name"] == "outer") continue;
    tids.insert(e["tid"].get<int>());
    const double start = e["ts"].get<double>(), end = start + e["dur"].get<double>();
    bool inside = false;  // within one of the outer scopes, whichever thread ran it
    for (const auto& [s, t] : outers) inside = inside || (start >= s - 1e-3 && end <= t + 1e-3);
    EXPECT_TRUE(inside) << e.dump();
  }
  EXPECT_GE(tids.size(), 1u);
  EXPECT_LE(tids.size(), 3u);
  const std::string table = Profiler::summary_table();
  const auto rows = op_rows(table);
  EXPECT_EQ(rows.at("optimizer").count, 2) << table;
  EXPECT_EQ(rows.at("muon").count, 24) << table;
  EXPECT_EQ(rows.at("newton_schulz").count, 24) << table;
  // Nested scopes charge their parent on their own thread: a task's scope contains its inner
  // one, and the outer scopes' self time (less the tasks their own thread ran) stays in range.
  EXPECT_GE(rows.at("muon").total_ms, rows.at("newton_schulz").total_ms) << table;
  EXPECT_GE(rows.at("optimizer").self_ms, 0.0);
  EXPECT_LE(rows.at("optimizer").self_ms, rows.at("optimizer").total_ms);
}

TEST_F(ProfilerTest, SessionChecksThePathFirstAndWritesAtFinish) {
  TempDir dir;
  EXPECT_THROW(ProfileSession("/no/such/dir/p.json"), InputError);
  EXPECT_THROW(ProfileSession(dir.path()), InputError);  // a directory
  { ProfileSession none(""); }
  EXPECT_FALSE(Profiler::enabled());
  const std::string path = dir.path() + "/p.json";
  {
    ProfileSession later(path, /*start_now=*/false);
    EXPECT_FALSE(Profiler::enabled());
    later.start();
    EXPECT_TRUE(Profiler::enabled());
    { ProfileScope s("data", "batch", {}, 0, 0); }
    later.finish();
  }
  EXPECT_FALSE(Profiler::enabled());
  EXPECT_EQ(complete_events(nlohmann::json::parse(read_file(path))).size(), 1u);
  {
    ProfileSession abandoned(dir.path() + "/never.json");
    EXPECT_TRUE(Profiler::enabled());
  }
  EXPECT_FALSE(Profiler::enabled()) << "a session that never finished stops the profiler";
  EXPECT_FALSE(file_exists(dir.path() + "/never.json"));
}

}  // namespace
}  // namespace nanogpt

namespace nanogpt {
namespace {

// Intervals on a named track (collectives in flight): their own thread in the trace, named,
// outside the op table; the table's track line gives their union and, for communication, the
// exposed part (comm_wait scopes) and the hidden rest.
TEST_F(ProfilerTest, TrackIntervalsHaveTheirOwnNamedThreadAndTheirUnionInTheTable) {
  TempDir dir;
  Profiler::start();
  const int64_t t0 = 1'000'000'000;
  const int64_t ms = 1'000'000;
  Profiler::record_interval("comm", "bucket 0", "communication", t0, t0 + 10 * ms, 100);
  Profiler::record_interval("comm", "bucket 1", "communication", t0 + 5 * ms, t0 + 15 * ms, 100);
  Profiler::record_interval("comm", "gather", "communication", t0 + 20 * ms, t0 + 25 * ms, 100);
  {
    ProfileScope wait("comm_wait", "buckets.wait", {}, 0, 0);
    busy(2000);
  }
  Profiler::stop();
  const nlohmann::json trace = trace_of(dir);
  int64_t track_tid = -1;
  for (const auto& e : trace.at("traceEvents")) {
    if (e.at("ph") == "M" && e.at("args").at("name") == "communication") track_tid = e.at("tid");
  }
  ASSERT_GE(track_tid, 0) << "no thread named 'communication'";
  int on_track = 0;
  for (const auto& e : complete_events(trace)) on_track += e.at("tid") == track_tid;
  EXPECT_EQ(on_track, 3);
  const std::string table = Profiler::summary_table();
  const auto rows = op_rows(table);
  EXPECT_EQ(rows.count("comm"), 0u) << table;  // intervals stay out of the shares
  EXPECT_NE(table.find("track 'communication': 3 intervals, 20.00 ms with one in flight"),
            std::string::npos)
      << table;
  EXPECT_NE(table.find("ms exposed (comm_wait)"), std::string::npos) << table;
}

}  // namespace
}  // namespace nanogpt
