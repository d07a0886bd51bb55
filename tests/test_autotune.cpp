#include "kernels/autotune.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <limits>
#include <nlohmann/json.hpp>
#include <ostream>
#include <thread>

#include "kernels/gemm.hpp"
#include "runtime/error.hpp"
#include "runtime/file_io.hpp"
#include "runtime/random.hpp"
#include "runtime/thread_pool.hpp"
#include "support/fixtures.hpp"

namespace nanogpt {
namespace {

// Never the real CPU, so a test can never read or clobber a real cache file's identity.
CpuIdentity test_cpu() {
  return {"Test CPU 9000 @ 3.00GHz", {"avx2", "fma"}};
}
CpuIdentity other_cpu() {
  return {"Other CPU 1", {"avx2", "fma", "avx512f"}};
}

TuneKey key(int64_t m = 64) {
  return {"gemm", m, 128, 256, "f32", "avx2"};
}

const std::vector<std::string> kAbc = {"a", "b", "c"};

// Fixed times per candidate, counting how often each is timed.
struct FakeTimer {
  explicit FakeTimer(std::vector<double> t) : times(std::move(t)), calls(times.size(), 0) {}
  std::function<double(size_t)> fn() {
    return [this](size_t i) {
      ++calls.at(i);
      return times.at(i);
    };
  }
  int total() const {
    int n = 0;
    for (int c : calls) n += c;
    return n;
  }
  std::vector<double> times;
  std::vector<int> calls;
};

size_t count(const std::string& haystack, const std::string& needle) {
  size_t n = 0;
  for (size_t p = haystack.find(needle); p != std::string::npos; p = haystack.find(needle, p + 1))
    ++n;
  return n;
}

nlohmann::json read_json(const std::string& path) {
  return nlohmann::json::parse(read_file(path));
}

TEST(Autotune, KeyStringNamesEveryField) {
  EXPECT_EQ(key(64).str(), "op=gemm M=64 N=128 K=256 dtype=f32 isa=avx2");
}

TEST(Autotune, PicksFastestTimingEachCandidateOncePerRound) {
  TempDir dir;
  AutotuneCache cache(dir.path(), test_cpu(), AutotuneMode::kOn);
  FakeTimer timer({3e-3, 1e-3, 2e-3});
  EXPECT_EQ(cache.choose(key(), kAbc, 0, timer.fn()), 1u);
  EXPECT_EQ(timer.calls, (std::vector<int>(3, kTuneRounds)));
}

// The host slows down (3x) for the first two trials, as the AMX Xeon's tile unit did: timed one
// after the other, 'c' (truly the slowest) would win on having run after the slowdown. In
// rounds, every candidate's fastest round stands for it, and the second round runs in reverse so
// the ones timed last in the first are timed first in the second.
TEST(Autotune, RoundsSpreadAHostSlowdownOverEveryCandidate) {
  static_assert(kTuneRounds >= 2, "one round cannot spread a slowdown");
  TempDir dir;
  AutotuneCache cache(dir.path(), test_cpu(), AutotuneMode::kOn);
  const std::vector<double> truth = {1.0e-3, 0.9e-3, 1.1e-3};
  std::vector<size_t> order;
  auto timer = [&](size_t i) {
    order.push_back(i);
    return truth.at(i) * (order.size() <= 2 ? 3.0 : 1.0);
  };
  EXPECT_EQ(cache.choose(key(), kAbc, 0, timer), 1u);
  ASSERT_GE(order.size(), 6u);
  EXPECT_EQ(std::vector<size_t>(order.begin(), order.begin() + 6),
            (std::vector<size_t>{0, 1, 2, 2, 1, 0}));
  // The stored time of each is its fastest round.
  const nlohmann::json times = read_json(cache.file_path())["entries"][key().str()]["times"];
  EXPECT_DOUBLE_EQ(times["a"].get<double>(), 1.0e-3);
  EXPECT_DOUBLE_EQ(times["b"].get<double>(), 0.9e-3);
  EXPECT_DOUBLE_EQ(times["c"].get<double>(), 1.1e-3);
}

TEST(Autotune, SecondCallIsCachedWithoutTiming) {
  TempDir dir;
  AutotuneCache cache(dir.path(), test_cpu(), AutotuneMode::kOn);
  FakeTimer timer({3e-3, 1e-3, 2e-3});
  ASSERT_EQ(cache.choose(key(), kAbc, 0, timer.fn()), 1u);
  EXPECT_EQ(cache.choose(key(), kAbc, 0, timer.fn()), 1u);
  EXPECT_EQ(timer.total(), 3 * kTuneRounds);
  // Another shape is another key.
  EXPECT_EQ(cache.choose(key(128), kAbc, 0, timer.fn()), 1u);
  EXPECT_EQ(timer.total(), 6 * kTuneRounds);
}

TEST(Autotune, PersistsAcrossCacheObjectsInTheFileForThisCpu) {
  TempDir dir;
  {
    AutotuneCache cache(dir.path(), test_cpu(), AutotuneMode::kOn);
    FakeTimer timer({3e-3, 1e-3, 2e-3});
    ASSERT_EQ(cache.choose(key(), kAbc, 0, timer.fn()), 1u);
  }
  AutotuneCache fresh(dir.path(), test_cpu(), AutotuneMode::kOn);
  ASSERT_TRUE(file_exists(fresh.file_path()));
  EXPECT_EQ(std::filesystem::path(fresh.file_path()).parent_path(), dir.path());
  EXPECT_NE(fresh.file_path().find("autotune-test-cpu-9000"), std::string::npos);

  nlohmann::json j = read_json(fresh.file_path());
  EXPECT_EQ(j["format"], "nanogpt-autotune-cache");
  EXPECT_EQ(j["version"], 1);
  EXPECT_EQ(j["cpu"]["model"], test_cpu().model);
  EXPECT_EQ(j["cpu"]["flags"], nlohmann::json(test_cpu().flags));
  const nlohmann::json& e = j["entries"][key().str()];
  EXPECT_EQ(e["choice"], "b");
  EXPECT_EQ(e["times"]["a"], 3e-3);
  EXPECT_EQ(e["times"]["b"], 1e-3);
  EXPECT_EQ(e["times"]["c"], 2e-3);

  FakeTimer timer({1e-3, 1e-3, 1e-3});
  testing::internal::CaptureStderr();
  EXPECT_EQ(fresh.choose(key(), kAbc, 0, timer.fn()), 1u);
  EXPECT_EQ(testing::internal::GetCapturedStderr(), "");
  EXPECT_EQ(timer.total(), 0);
  // The stored name is what counts, not its position.
  EXPECT_EQ(fresh.choose(key(), {"c", "b"}, 0, timer.fn()), 1u);
  EXPECT_EQ(timer.total(), 0);
}

TEST(Autotune, RetunesWhenCachedChoiceIsNoLongerACandidate) {
  TempDir dir;
  {
    AutotuneCache cache(dir.path(), test_cpu(), AutotuneMode::kOn);
    FakeTimer timer({3e-3, 1e-3, 2e-3});
    ASSERT_EQ(cache.choose(key(), kAbc, 0, timer.fn()), 1u);
    FakeTimer retimer({3e-3, 2e-3, 5e-4});
    EXPECT_EQ(cache.choose(key(), {"a", "c", "d"}, 0, retimer.fn()), 2u);
    EXPECT_EQ(retimer.calls, (std::vector<int>(3, kTuneRounds)));
  }
  // Also when the stale choice comes from the file.
  {
    AutotuneCache cache(dir.path(), test_cpu(), AutotuneMode::kOn);
    FakeTimer timer({1e-3, 2e-3});
    EXPECT_EQ(cache.choose(key(), {"e", "f"}, 1, timer.fn()), 0u);
    EXPECT_EQ(timer.total(), 2 * kTuneRounds);
  }
  AutotuneCache fresh(dir.path(), test_cpu(), AutotuneMode::kOn);
  FakeTimer none({1, 1});
  EXPECT_EQ(fresh.choose(key(), {"f", "e"}, 0, none.fn()), 1u);
  EXPECT_EQ(none.total(), 0);
}

TEST(Autotune, ModeOffReturnsDefaultWithoutTimingOrFileAccess) {
  TempDir dir;
  std::string cache_dir = dir.path() + "/never-created";
  AutotuneCache cache(cache_dir, test_cpu(), AutotuneMode::kOff);
  FakeTimer timer({3e-3, 1e-3, 2e-3});
  EXPECT_EQ(cache.choose(key(), kAbc, 2, timer.fn()), 2u);
  EXPECT_EQ(cache.choose(key(), kAbc, 0, timer.fn()), 0u);
  EXPECT_EQ(timer.total(), 0);
  EXPECT_FALSE(std::filesystem::exists(cache_dir));

  // A broken file is not even looked at.
  std::filesystem::create_directories(cache_dir);
  write_file_atomic(cache.file_path(), "garbage");
  testing::internal::CaptureStderr();
  EXPECT_EQ(cache.choose(key(), kAbc, 1, timer.fn()), 1u);
  EXPECT_EQ(testing::internal::GetCapturedStderr(), "");
  EXPECT_EQ(read_file(cache.file_path()), "garbage");
}

TEST(Autotune, PrintModeReportsTrialsChoiceAndCachedHits) {
  TempDir dir;
  {
    AutotuneCache cache(dir.path(), test_cpu(), AutotuneMode::kPrint);
    FakeTimer timer({3e-3, 1e-3, 2e-3});
    testing::internal::CaptureStderr();
    ASSERT_EQ(cache.choose(key(), kAbc, 0, timer.fn()), 1u);
    std::string out = testing::internal::GetCapturedStderr();
    const std::string k = key().str();
    const std::string first = k + ": round 1/" + std::to_string(kTuneRounds) + ", ";
    const std::string second = k + ": round 2/" + std::to_string(kTuneRounds) + ", ";
    EXPECT_NE(out.find(first + "trial 1/3 'a' 3.000 ms"), std::string::npos) << out;
    EXPECT_NE(out.find(first + "trial 2/3 'b' 1.000 ms"), std::string::npos) << out;
    EXPECT_NE(out.find(first + "trial 3/3 'c' 2.000 ms"), std::string::npos) << out;
    EXPECT_NE(out.find(second + "trial 1/3 'c' 2.000 ms"), std::string::npos) << out;
    EXPECT_NE(out.find(second + "trial 3/3 'a' 3.000 ms"), std::string::npos) << out;
    EXPECT_NE(out.find(k + ": chose 'b' (1.000 ms, default 'a' 3.000 ms)"), std::string::npos)
        << out;
    EXPECT_EQ(out.find("warning"), std::string::npos) << out;

    // Repeated lookups of a reported choice stay quiet.
    testing::internal::CaptureStderr();
    cache.choose(key(), kAbc, 0, timer.fn());
    EXPECT_EQ(testing::internal::GetCapturedStderr(), "");
  }
  AutotuneCache fresh(dir.path(), test_cpu(), AutotuneMode::kPrint);
  FakeTimer timer({1, 1, 1});
  testing::internal::CaptureStderr();
  EXPECT_EQ(fresh.choose(key(), kAbc, 0, timer.fn()), 1u);
  std::string out = testing::internal::GetCapturedStderr();
  EXPECT_NE(out.find(key().str() + ": cached 'b' (1.000 ms) from " + fresh.file_path()),
            std::string::npos)
      << out;
  EXPECT_EQ(timer.total(), 0);
}

// A GEMM's heights share a tuning key by the power of two at or above them, so products of
// heights 33..64 are timed once between them (a batched decode's height shrinks every round);
// the blocking chosen for the bucket, fitted to each height, gives the default blocking's bits.
TEST(Autotune, GemmHeightsOfOneBucketAreTunedOnce) {
  TempDir dir;
  ThreadPool one(1);
  const ThreadPool::Use in_one(one);
  const int64_t N = 1024, K = 512, M_max = 64;
  Rng rng(17);
  std::vector<float> A(static_cast<size_t>(M_max * K)), B(static_cast<size_t>(K * N));
  for (float& x : A) x = static_cast<float>(rng.normal());
  for (float& x : B) x = static_cast<float>(rng.normal());
  auto product = [&](AutotuneCache& cache, int64_t M) {
    const AutotuneCache::Use use(cache);
    std::vector<float> C(static_cast<size_t>(M * N), 0.0f);
    gemm(Trans::kNo, Trans::kNo, M, N, K, 1.0f, A.data(), K, B.data(), N, 0.0f, C.data(), N);
    return C;
  };
  AutotuneCache tuned(dir.path(), test_cpu(), AutotuneMode::kPrint);
  AutotuneCache off(dir.path() + "/off", test_cpu(), AutotuneMode::kOff);
  testing::internal::CaptureStderr();
  for (int64_t M : {40, 64, 33, 57}) {
    EXPECT_EQ(product(tuned, M), product(off, M)) << "height " << M;
  }
  std::string out = testing::internal::GetCapturedStderr();
  EXPECT_EQ(count(out, ": chose "), 1u) << out;
  EXPECT_EQ(count(out, "M=64 "), count(out, "M=")) << out;
  // The next bucket is a key of its own.
  testing::internal::CaptureStderr();
  product(tuned, 65);
  out = testing::internal::GetCapturedStderr();
  EXPECT_EQ(count(out, ": chose "), 1u) << out;
  EXPECT_NE(out.find("M=128 "), std::string::npos) << out;
}

TEST(Autotune, NormalModeIsSilent) {
  TempDir dir;
  AutotuneCache cache(dir.path(), test_cpu(), AutotuneMode::kOn);
  FakeTimer timer({3e-3, 1e-3, 2e-3});
  testing::internal::CaptureStderr();
  cache.choose(key(), kAbc, 0, timer.fn());
  cache.choose(key(), kAbc, 0, timer.fn());
  EXPECT_EQ(testing::internal::GetCapturedStderr(), "");
}

// How a cache file can be untrustworthy, and the phrase its warning must contain.
struct BadFile {
  const char* name;
  const char* why;
};

// So gtest lists the case by name rather than by the bytes of its pointers.
void PrintTo(const BadFile& b, std::ostream* os) {
  *os << b.name;
}

class AutotuneBadFile : public testing::TestWithParam<BadFile> {};

// A valid file for test_cpu() whose only entry chose "a", built by the real writer.
std::string valid_file_choosing_a(const CpuIdentity& cpu) {
  TempDir dir;
  AutotuneCache cache(dir.path(), cpu, AutotuneMode::kOn);
  FakeTimer timer({1e-3, 2e-3, 3e-3});
  cache.choose(key(), kAbc, 1, timer.fn());
  return read_file(cache.file_path());
}

std::string bad_contents(const std::string& name) {
  std::string valid = valid_file_choosing_a(test_cpu());
  nlohmann::json j = nlohmann::json::parse(valid);
  if (name == "Garbage") return std::string("\x00\xff\x13garbage{", 11);
  if (name == "Empty") return "";
  if (name == "Truncated") return valid.substr(0, valid.size() / 2);
  if (name == "NotAnObject") return "[1, 2, 3]";
  if (name == "WrongFormatTag") j["format"] = "something-else";
  if (name == "WrongVersion") j["version"] = 2;
  if (name == "OtherCpusFile") return valid_file_choosing_a(other_cpu());
  if (name == "SameModelOtherFlags") j["cpu"]["flags"] = {"avx2"};
  if (name == "EntriesNotAnObject") j["entries"] = nlohmann::json::array();
  if (name == "ChoiceNotAString") j["entries"][key().str()]["choice"] = 7;
  if (name == "ChoiceWithoutTime") j["entries"][key().str()]["choice"] = "zzz";
  if (name == "NegativeTime") j["entries"][key().str()]["times"]["b"] = -1.0;
  return j.dump(2);
}

TEST_P(AutotuneBadFile, WarnsOnceRetunesAndRewritesTheFileValid) {
  const BadFile& param = GetParam();
  TempDir dir;
  std::string path;
  {
    AutotuneCache cache(dir.path(), test_cpu(), AutotuneMode::kOn);
    path = cache.file_path();
    write_file_atomic(path, bad_contents(param.name));
    FakeTimer timer({3e-3, 1e-3, 2e-3});
    testing::internal::CaptureStderr();
    // A trusted file would have answered "a" without timing.
    EXPECT_EQ(cache.choose(key(), kAbc, 0, timer.fn()), 1u);
    EXPECT_EQ(cache.choose(key(128), kAbc, 0, timer.fn()), 1u);
    std::string err = testing::internal::GetCapturedStderr();
    EXPECT_EQ(timer.total(), 6 * kTuneRounds);
    EXPECT_EQ(count(err, "warning"), 1u) << err;
    EXPECT_NE(err.find("'" + path + "'"), std::string::npos) << err;
    EXPECT_NE(err.find(param.why), std::string::npos) << err;
  }
  nlohmann::json j = read_json(path);
  EXPECT_EQ(j["cpu"]["model"], test_cpu().model);
  EXPECT_EQ(j["entries"].size(), 2u);

  AutotuneCache fresh(dir.path(), test_cpu(), AutotuneMode::kOn);
  FakeTimer timer({1, 1, 1});
  testing::internal::CaptureStderr();
  EXPECT_EQ(fresh.choose(key(), kAbc, 0, timer.fn()), 1u);
  EXPECT_EQ(testing::internal::GetCapturedStderr(), "");
  EXPECT_EQ(timer.total(), 0);
}

INSTANTIATE_TEST_SUITE_P(
    Autotune, AutotuneBadFile,
    testing::Values(BadFile{"Garbage", "not valid JSON"}, BadFile{"Empty", "not valid JSON"},
                    BadFile{"Truncated", "not valid JSON"},
                    BadFile{"NotAnObject", "not a nanogpt autotune cache"},
                    BadFile{"WrongFormatTag", "not a nanogpt autotune cache"},
                    BadFile{"WrongVersion", "format version 2"},
                    BadFile{"OtherCpusFile", "different CPU, 'Other CPU 1'"},
                    BadFile{"SameModelOtherFlags", "different CPU"},
                    BadFile{"EntriesNotAnObject", "no \"entries\" object"},
                    BadFile{"ChoiceNotAString", "malformed entry"},
                    BadFile{"ChoiceWithoutTime", "the choice 'zzz' has no time"},
                    BadFile{"NegativeTime", "time of 'b'"}),
    [](const testing::TestParamInfo<BadFile>& case_info) {
      return std::string(case_info.param.name);
    });

TEST(Autotune, UnwritableCacheDirWarnsAndKeepsResultsInMemory) {
  TempDir dir;
  // A regular file where the directory should be: fails even for root, unlike permissions.
  std::string blocker = dir.path() + "/blocker";
  write_file_atomic(blocker, "not a directory");
  for (std::string cache_dir : {blocker, blocker + "/nanogpt"}) {
    SCOPED_TRACE(cache_dir);
    AutotuneCache cache(cache_dir, test_cpu(), AutotuneMode::kOn);
    FakeTimer timer({3e-3, 1e-3, 2e-3});
    testing::internal::CaptureStderr();
    EXPECT_EQ(cache.choose(key(), kAbc, 0, timer.fn()), 1u);
    EXPECT_EQ(cache.choose(key(), kAbc, 0, timer.fn()), 1u);
    EXPECT_EQ(cache.choose(key(128), kAbc, 0, timer.fn()), 1u);
    std::string err = testing::internal::GetCapturedStderr();
    EXPECT_EQ(timer.total(), 6 * kTuneRounds);
    EXPECT_EQ(count(err, "warning"), 1u) << err;
    EXPECT_NE(err.find("cannot save autotune cache '" + cache.file_path() + "'"), std::string::npos)
        << err;
  }
  EXPECT_EQ(read_file(blocker), "not a directory");
}

TEST(Autotune, NoCacheDirWarnsAndKeepsResultsInMemory) {
  AutotuneCache cache("", test_cpu(), AutotuneMode::kOn);
  EXPECT_EQ(cache.file_path(), "");
  FakeTimer timer({3e-3, 1e-3, 2e-3});
  testing::internal::CaptureStderr();
  EXPECT_EQ(cache.choose(key(), kAbc, 0, timer.fn()), 1u);
  EXPECT_EQ(cache.choose(key(), kAbc, 0, timer.fn()), 1u);
  std::string err = testing::internal::GetCapturedStderr();
  EXPECT_EQ(timer.total(), 3 * kTuneRounds);
  EXPECT_EQ(count(err, "warning"), 1u) << err;
  EXPECT_NE(err.find("NANOGPT_CACHE_DIR"), std::string::npos) << err;
}

TEST(Autotune, SaveKeepsEntriesAnotherProcessWroteMeanwhile) {
  TempDir dir;
  // Two objects on one directory stand in for two processes.
  AutotuneCache first(dir.path(), test_cpu(), AutotuneMode::kOn);
  AutotuneCache second(dir.path(), test_cpu(), AutotuneMode::kOn);
  FakeTimer t0({3e-3, 1e-3, 2e-3});
  ASSERT_EQ(first.choose(key(1), kAbc, 0, t0.fn()), 1u);
  FakeTimer t2({1e-3, 2e-3, 3e-3});
  // `second` saves while `first` is timing, after `first` last read the file.
  FakeTimer t1({2e-3, 3e-3, 1e-3});
  auto timing_with_interruption = [&](size_t i) {
    if (i == 0) {
      EXPECT_EQ(second.choose(key(2), kAbc, 2, t2.fn()), 0u);
    }
    return t1.fn()(i);
  };
  ASSERT_EQ(first.choose(key(3), kAbc, 0, timing_with_interruption), 2u);

  nlohmann::json j = read_json(first.file_path());
  EXPECT_EQ(j["entries"].size(), 3u) << j.dump(2);
  EXPECT_EQ(j["entries"][key(1).str()]["choice"], "b");
  EXPECT_EQ(j["entries"][key(2).str()]["choice"], "a");
  EXPECT_EQ(j["entries"][key(3).str()]["choice"], "c");
  // Each learns the other's result from the file instead of timing it.
  FakeTimer none({1, 1, 1});
  EXPECT_EQ(first.choose(key(2), kAbc, 2, none.fn()), 0u);
  EXPECT_EQ(second.choose(key(3), kAbc, 0, none.fn()), 2u);
  EXPECT_EQ(none.total(), 0);
}

TEST(Autotune, EachCpuHasItsOwnFile) {
  TempDir dir;
  AutotuneCache mine(dir.path(), test_cpu(), AutotuneMode::kOn);
  AutotuneCache theirs(dir.path(), other_cpu(), AutotuneMode::kOn);
  AutotuneCache same_model_fewer_flags(dir.path(), {test_cpu().model, {"avx2"}}, AutotuneMode::kOn);
  EXPECT_NE(mine.file_path(), theirs.file_path());
  EXPECT_NE(mine.file_path(), same_model_fewer_flags.file_path());
  FakeTimer t1({3e-3, 1e-3, 2e-3});
  FakeTimer t2({1e-3, 3e-3, 2e-3});
  EXPECT_EQ(mine.choose(key(), kAbc, 0, t1.fn()), 1u);
  EXPECT_EQ(theirs.choose(key(), kAbc, 0, t2.fn()), 0u);
  EXPECT_EQ(t2.total(), 3 * kTuneRounds);
  AutotuneCache mine_again(dir.path(), test_cpu(), AutotuneMode::kOn);
  FakeTimer none({1, 1, 1});
  EXPECT_EQ(mine_again.choose(key(), kAbc, 0, none.fn()), 1u);
  EXPECT_EQ(none.total(), 0);
}

TEST(Autotune, InvalidTimesAreNeverChosenNorStored) {
  TempDir dir;
  AutotuneCache cache(dir.path(), test_cpu(), AutotuneMode::kOn);
  const double nan = std::numeric_limits<double>::quiet_NaN();
  FakeTimer timer({nan, 2e-3, -1.0, 3e-3});
  EXPECT_EQ(cache.choose(key(), {"a", "b", "c", "d"}, 0, timer.fn()), 1u);
  nlohmann::json times = read_json(cache.file_path())["entries"][key().str()]["times"];
  EXPECT_EQ(times.size(), 2u) << times.dump();

  // Nothing measurable: the default, a warning, and nothing written for that key.
  FakeTimer broken({nan, std::numeric_limits<double>::infinity()});
  testing::internal::CaptureStderr();
  EXPECT_EQ(cache.choose(key(128), {"x", "y"}, 1, broken.fn()), 1u);
  EXPECT_EQ(cache.choose(key(128), {"x", "y"}, 1, broken.fn()), 1u);
  std::string err = testing::internal::GetCapturedStderr();
  EXPECT_EQ(broken.total(), 2 * kTuneRounds) << "timed in the first call only";
  EXPECT_EQ(count(err, "warning"), 1u) << err;
  EXPECT_FALSE(read_json(cache.file_path())["entries"].contains(key(128).str()));
}

TEST(Autotune, RejectsBadArgumentsInEveryMode) {
  for (AutotuneMode mode : {AutotuneMode::kOff, AutotuneMode::kOn}) {
    AutotuneCache cache("", test_cpu(), mode);
    FakeTimer timer({1, 1, 1});
    EXPECT_THROW(cache.choose(key(), {}, 0, timer.fn()), Error);
    EXPECT_THROW(cache.choose(key(), kAbc, 3, timer.fn()), Error);
  }
  AutotuneCache cache("", test_cpu(), AutotuneMode::kOn);
  FakeTimer timer({1, 1, 1});
  EXPECT_THROW(cache.choose(key(), {"a", "b", "a"}, 0, timer.fn()), Error);
  EXPECT_EQ(timer.total(), 0);
}

TEST(Autotune, NestedTuningWorksAndSelfReferenceIsAnError) {
  TempDir dir;
  AutotuneCache cache(dir.path(), test_cpu(), AutotuneMode::kOn);
  FakeTimer inner({2e-3, 1e-3});
  FakeTimer outer({1e-3, 2e-3, 3e-3});
  // A composite op whose candidates run a tuned sub-kernel.
  auto composite = [&](size_t i) {
    EXPECT_EQ(cache.choose(key(7), {"x", "y"}, 0, inner.fn()), 1u);
    return outer.fn()(i);
  };
  EXPECT_EQ(cache.choose(key(), kAbc, 2, composite), 0u);
  EXPECT_EQ(inner.total(), 2 * kTuneRounds) << "tuned once, in the outer's first trial";

  // A candidate that (wrongly) asks for the choice being tuned.
  std::function<double(size_t)> recursive;
  recursive = [&](size_t) {
    cache.choose(key(9), kAbc, 0, recursive);
    return 1.0;
  };
  try {
    cache.choose(key(9), kAbc, 0, recursive);
    ADD_FAILURE() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("time_candidate"), std::string::npos) << e.what();
  }
  // The failed tuning left nothing behind: the key can still be tuned.
  FakeTimer later({3e-3, 1e-3, 2e-3});
  EXPECT_EQ(cache.choose(key(9), kAbc, 0, later.fn()), 1u);
}

TEST(Autotune, ConcurrentFirstUsesTuneOnce) {
  TempDir dir;
  AutotuneCache cache(dir.path(), test_cpu(), AutotuneMode::kOn);
  std::atomic<int> calls{0};
  auto timer = [&](size_t i) {
    ++calls;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    return i == 2 ? 1e-3 : 2e-3;
  };
  std::vector<std::thread> threads;
  std::vector<size_t> got(4, 99);
  for (size_t t = 0; t < got.size(); ++t) {
    threads.emplace_back([&, t] { got[t] = cache.choose(key(), kAbc, 0, timer); });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(calls.load(), 3 * kTuneRounds);
  for (size_t g : got) EXPECT_EQ(g, 2u);
}

TEST(Autotune, FreeFunctionUsesTheCacheInScope) {
  TempDir dir;
  AutotuneCache cache(dir.path(), test_cpu(), AutotuneMode::kOn);
  AutotuneCache off("", test_cpu(), AutotuneMode::kOff);
  FakeTimer timer({3e-3, 1e-3, 2e-3});
  {
    AutotuneCache::Use use(cache);
    EXPECT_EQ(&AutotuneCache::current(), &cache);
    EXPECT_EQ(autotune(key(), kAbc, 0, timer.fn()), 1u);
    {
      AutotuneCache::Use inner(off);
      EXPECT_EQ(autotune(key(), kAbc, 0, timer.fn()), 0u);
    }
    EXPECT_EQ(autotune(key(), kAbc, 0, timer.fn()), 1u);
  }
  EXPECT_EQ(timer.total(), 3 * kTuneRounds);
  EXPECT_TRUE(file_exists(cache.file_path()));
}

TEST(Autotune, ModeParsing) {
  EXPECT_EQ(parse_autotune_mode(""), AutotuneMode::kOn);
  EXPECT_EQ(parse_autotune_mode("1"), AutotuneMode::kOn);
  EXPECT_EQ(parse_autotune_mode("0"), AutotuneMode::kOff);
  EXPECT_EQ(parse_autotune_mode("print"), AutotuneMode::kPrint);
  for (const char* bad : {"yes", "2", "PRINT", "off", " 1"}) {
    try {
      parse_autotune_mode(bad);
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const InputError& e) {
      std::string msg = e.what();
      EXPECT_NE(msg.find("NANOGPT_AUTOTUNE='" + std::string(bad) + "'"), std::string::npos) << msg;
      EXPECT_NE(msg.find("0 ("), std::string::npos) << msg;
      EXPECT_NE(msg.find("1 ("), std::string::npos) << msg;
      EXPECT_NE(msg.find("print ("), std::string::npos) << msg;
    }
  }
}

TEST(Autotune, CacheDirResolution) {
  EXPECT_EQ(resolve_autotune_cache_dir("/n", "/x", "/h"), "/n");
  EXPECT_EQ(resolve_autotune_cache_dir(nullptr, "/x", "/h"), "/x/nanogpt");
  EXPECT_EQ(resolve_autotune_cache_dir("", "/x", "/h"), "/x/nanogpt");
  EXPECT_EQ(resolve_autotune_cache_dir(nullptr, nullptr, "/h"), "/h/.cache/nanogpt");
  EXPECT_EQ(resolve_autotune_cache_dir(nullptr, "relative", "/h"), "/h/.cache/nanogpt");
  EXPECT_EQ(resolve_autotune_cache_dir(nullptr, "", "/h"), "/h/.cache/nanogpt");
  EXPECT_EQ(resolve_autotune_cache_dir(nullptr, nullptr, nullptr), "");
}

TEST(Autotune, TimeBestOfWarmsUpThenTimesReps) {
  for (int reps : {1, 3, 5}) {
    int runs = 0;
    double t = time_best_of([&] { ++runs; }, reps);
    EXPECT_EQ(runs, reps + 1);
    EXPECT_GT(t, 0.0);
    EXPECT_TRUE(std::isfinite(t));
  }
  int runs = 0;
  double t = time_best_of([&] {
    ++runs;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  });
  EXPECT_EQ(runs, 4);
  EXPECT_GE(t, 1e-3);
  EXPECT_THROW(time_best_of([] {}, 0), Error);
}

TEST(Autotune, TimeBestOfKeepsLongRunsWithinTheBudget) {
  // Runs of a bit over a quarter of the budget: the warm-up and at most three timed runs
  // (fewer if the sleeps overrun), not the ten asked for.
  const auto medium = std::chrono::duration<double>(0.275 * kTuneBudgetSeconds);
  int runs = 0;
  double t = time_best_of(
      [&] {
        ++runs;
        std::this_thread::sleep_for(medium);
      },
      10);
  EXPECT_GE(runs, 1);
  EXPECT_LE(runs, 4);
  EXPECT_GE(t, medium.count());
  // A run past kTuneLongRunSeconds is timed once, with no warm-up.
  runs = 0;
  t = time_best_of(
      [&] {
        ++runs;
        std::this_thread::sleep_for(std::chrono::duration<double>(kTuneLongRunSeconds));
      },
      5);
  EXPECT_EQ(runs, 1);
  EXPECT_GE(t, kTuneLongRunSeconds);
}

}  // namespace
}  // namespace nanogpt
