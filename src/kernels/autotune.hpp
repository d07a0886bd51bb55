// Empirical kernel tuning, the CPU analogue of Triton's autotuner. The best blocking for a
// shape depends on cache sizes, core count and memory bandwidth in ways no model predicts
// well, so the first use of each (operation, shape, dtype, ISA) times every candidate and
// keeps the fastest. Choices are remembered per CPU in a cache file so later runs skip the
// timing; the file is only a hint, and one that is corrupt or from another CPU is ignored.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <string_view>
#include <vector>

namespace nanogpt {

struct TuneKey {
  std::string op;
  int64_t M = 0, N = 0, K = 0;
  std::string dtype, isa;
  // "op=gemm M=64 N=768 K=768 dtype=f32 isa=avx2": the key under which the choice is cached.
  std::string str() const;
};

// Returns the index of the candidate to use for `key`. Cached (in memory, then the cache file
// for this CPU) choices are returned without timing if the cached name is still among
// candidate_names; otherwise time_candidate(i) (seconds, lower is better) is called once per
// candidate in each of kTuneRounds rounds (every other round in reverse order), each
// candidate's fastest valid round stands for it, and the fastest candidate is kept, remembered
// and saved. NANOGPT_AUTOTUNE=0: default_index, no
// timing, no file access. NANOGPT_AUTOTUNE=print: every trial (key, candidate, time) and the
// choice (also "cached" hits) go to stderr.
// Goes through AutotuneCache::current(), so the environment is read on the first call.
size_t autotune(const TuneKey& key, const std::vector<std::string>& candidate_names,
                size_t default_index, const std::function<double(size_t)>& time_candidate);

// Rounds of timing per candidate, interleaved with the other candidates' (see autotune()).
inline constexpr int kTuneRounds = 2;

// One warm-up run, then the best of up to `reps` timed runs, in seconds: only as many as fit
// kTuneBudgetSeconds (at least one), and a first run of kTuneLongRunSeconds or more is timed
// alone, without a warm-up.
inline constexpr double kTuneBudgetSeconds = 0.2;
inline constexpr double kTuneLongRunSeconds = 0.1;
double time_best_of(const std::function<void()>& fn, int reps = 3);

// ---- Configuration, and the cache behind autotune() (tests drive it directly) ----

enum class AutotuneMode {
  kOff,    // NANOGPT_AUTOTUNE=0: always the default candidate, never time, never touch files
  kOn,     // unset, empty or 1
  kPrint,  // NANOGPT_AUTOTUNE=print: as kOn, and report trials and choices on stderr
};

// Throws InputError naming the allowed values (0, 1, print) for anything else.
AutotuneMode parse_autotune_mode(std::string_view value);
AutotuneMode autotune_mode_from_env();

// $NANOGPT_CACHE_DIR, else $XDG_CACHE_HOME/nanogpt, else $HOME/.cache/nanogpt; "" if none
// applies (results then live in memory only). Arguments are the variables' values, nullptr when
// unset. A relative XDG_CACHE_HOME is ignored, as the XDG base directory spec requires.
std::string resolve_autotune_cache_dir(const char* nanogpt_cache_dir, const char* xdg_cache_home,
                                       const char* home);
std::string autotune_cache_dir_from_env();

// What a cached choice is valid for. Feature flags are part of it because the same model string
// can come with AVX-512 disabled (by BIOS, hypervisor or OS), which changes every timing.
struct CpuIdentity {
  std::string model;
  std::vector<std::string> flags;
  static CpuIdentity current();
  bool operator==(const CpuIdentity&) const = default;
};

// Tuning results for one CPU: an in-memory map backed by `<dir>/autotune-<model>-<hash>.json`.
// Thread-safe. Tuning holds the lock, so concurrent first uses of a key time it once and
// timings do not compete for cores; the lock is recursive so a time_candidate that itself
// runs autotuned kernels (tuning a sub-problem) works.
class AutotuneCache {
 public:
  // No file is touched here; the cache file is read on the first lookup that misses memory.
  AutotuneCache(std::string dir, CpuIdentity cpu, AutotuneMode mode);
  AutotuneCache(const AutotuneCache&) = delete;
  AutotuneCache& operator=(const AutotuneCache&) = delete;

  // autotune() against this cache; see there.
  size_t choose(const TuneKey& key, const std::vector<std::string>& candidate_names,
                size_t default_index, const std::function<double(size_t)>& time_candidate);

  AutotuneMode mode() const { return mode_; }
  const std::string& dir() const { return dir_; }
  const std::string& file_path() const { return path_; }  // "" when there is no cache dir
  // Unique among the caches this process ever creates (never reused after one is destroyed),
  // so what a caller remembers of a cache's answers can be keyed by it (gemm/blocking_memo.hpp).
  uint64_t id() const { return id_; }

  // Built from the environment and this CPU on first use.
  static AutotuneCache& global();
  // The innermost Use on this thread, else global().
  static AutotuneCache& current();

  // Routes autotune() on this thread to another cache while in scope (tests, benchmarks).
  class Use {
   public:
    explicit Use(AutotuneCache& cache);
    ~Use();
    Use(const Use&) = delete;
    Use& operator=(const Use&) = delete;

   private:
    AutotuneCache* previous_;
  };

 private:
  struct Entry {
    std::string choice;
    std::map<std::string, double> times;  // seconds per candidate name, as measured
  };

  // Index of the cached choice for `key` if it is among `names`.
  bool lookup_locked(const std::string& key, const std::vector<std::string>& names,
                     size_t& index) const;
  // Valid entries of the cache file; empty (after a warning) if it is missing or untrusted.
  std::map<std::string, Entry> read_file_locked();
  size_t tune_locked(const std::string& key, const std::vector<std::string>& names,
                     size_t default_index, const std::function<double(size_t)>& time_candidate);
  // Takes the file's entries for every key this process has not measured itself.
  void merge_from_file_locked();
  // Re-reads the file so entries other processes added are kept, then replaces it atomically.
  void save_locked();
  void warn_locked(const std::string& message);
  static bool parse(const std::string& text, const CpuIdentity& cpu,
                    std::map<std::string, Entry>& entries, std::string& why);
  static std::string serialize(const CpuIdentity& cpu, const std::map<std::string, Entry>& entries);
  void report_locked(const std::string& line) const;

  const std::string dir_;
  const CpuIdentity cpu_;
  const AutotuneMode mode_;
  const std::string path_;
  const uint64_t id_;

  std::recursive_mutex mutex_;
  std::map<std::string, Entry> entries_;
  std::set<std::string> measured_here_;          // keys whose entry this process timed
  std::map<std::string, std::string> reported_;  // key -> choice already printed in print mode
  std::set<std::string> tuning_;  // keys being timed now, to catch a candidate tuning its own key
  std::set<std::string> warned_;  // a broken file is seen on every re-read; say so once
  bool save_failed_ = false;
};

}  // namespace nanogpt
