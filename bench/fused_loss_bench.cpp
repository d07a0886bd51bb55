// Time and peak memory of the model head (lm_head + soft-cap + cross-entropy, forward and
// backward), fused against unfused.
//
//   fused_loss_bench [--T 16384] [--V 50304] [--d 768] [--mode fused|unfused|both] [--fp8]
//                    [--warmup 1] [--repeats 3] [--row-block N] [--precision fp32|bf16]
//
// Each mode runs in its own fork()ed child, so one mode's allocations cannot hide in the other's
// peak: the child allocates and fills its inputs, resets its high-water mark
// (/proc/self/clear_refs), and reports VmHWM minus the RSS at that point as the computation's
// extra memory. The parent also reports the child's whole peak RSS from wait4(). Prints one JSON
// line per mode and a final line with the unfused/fused ratios.
//
// The unfused mode allocates T×V floats of logits and as many for their gradient: 2 × 3.3 GB at
// the default size.
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "kernels/fused_linear_cross_entropy.hpp"
#include "runtime/cpu_info.hpp"
#include "runtime/thread_pool.hpp"
#include "runtime/workspace.hpp"

namespace {

struct Options {
  int64_t T = 16384, V = 50304, d = 768;
  std::string mode = "both";
  bool fp8 = false;
  int warmup = 1, repeats = 3;
  int64_t row_block = 0;
  std::string precision = "fp32";
};

[[noreturn]] void usage(const std::string& problem) {
  std::cerr << "fused_loss_bench: " << problem << "\n"
            << "usage: fused_loss_bench [--T N] [--V N] [--d N] [--mode fused|unfused|both] "
               "[--fp8] [--warmup N] [--repeats N] [--row-block N] [--precision fp32|bf16]\n";
  std::exit(2);
}

int64_t parse_count(const std::string& flag, const char* text, int64_t min) {
  char* end = nullptr;
  const long long v = std::strtoll(text, &end, 10);
  if (end == text || *end != '\0' || v < min) {
    usage(flag + " wants a whole number >= " + std::to_string(min) + ", got '" + text + "'");
  }
  return v;
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> const char* {
      if (i + 1 >= argc) usage(a + " needs a value");
      return argv[++i];
    };
    if (a == "--T") {
      o.T = parse_count(a, value(), 1);
    } else if (a == "--V") {
      o.V = parse_count(a, value(), 1);
    } else if (a == "--d") {
      o.d = parse_count(a, value(), 1);
    } else if (a == "--mode") {
      o.mode = value();
      if (o.mode != "fused" && o.mode != "unfused" && o.mode != "both") {
        usage("--mode is fused, unfused or both, not '" + o.mode + "'");
      }
    } else if (a == "--fp8") {
      o.fp8 = true;
    } else if (a == "--warmup") {
      o.warmup = static_cast<int>(parse_count(a, value(), 0));
    } else if (a == "--repeats") {
      o.repeats = static_cast<int>(parse_count(a, value(), 1));
    } else if (a == "--row-block") {
      o.row_block = parse_count(a, value(), 0);
    } else if (a == "--precision") {
      o.precision = value();
      if (o.precision != "fp32" && o.precision != "bf16") {
        usage("--precision is fp32 or bf16, not '" + o.precision + "'");
      }
    } else {
      usage("unknown argument '" + a + "'");
    }
  }
  return o;
}

// A field of /proc/self/status in bytes (it reports kB).
int64_t status_bytes(const char* field) {
  std::ifstream in("/proc/self/status");
  std::string line;
  const size_t n = std::strlen(field);
  while (std::getline(in, line)) {
    if (line.compare(0, n, field) == 0 && line.size() > n && line[n] == ':') {
      return std::stoll(line.substr(n + 1)) * 1024;
    }
  }
  return -1;
}

std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0) {
      const size_t colon = line.find(':');
      if (colon != std::string::npos) return line.substr(line.find_first_not_of(" \t", colon + 1));
    }
  }
  return "unknown";
}

// What a child sends back through its pipe.
struct Result {
  double loss;
  double median_seconds, min_seconds, max_seconds;
  int64_t baseline_rss, peak_hwm, workspace_bytes, row_block;
  int64_t workspace_peak_bytes;  // measured: the kernels' Workspace, GEMM packing included
  double dx_norm, dW_norm;
  int hwm_reset;  // 1 if clear_refs reset the high-water mark (else peak includes the setup)
  int threads;
  double load_before, load_after;
};

double norm(const std::vector<float>& v) {
  double s = 0;
  for (float e : v) s += static_cast<double>(e) * e;
  return std::sqrt(s);
}

// Runs in the child: inputs like the model's (x rows of RMS 1, a random head), then warm-up and
// timed forward+backward calls.
Result measure(const Options& o, bool fused) {
  using nanogpt::FusedLossParams;
  std::vector<float> x(static_cast<size_t>(o.T * o.d)), W(static_cast<size_t>(o.V * o.d));
  std::vector<int32_t> targets(static_cast<size_t>(o.T));
  // A fixed xorshift stream: the same inputs in every child, fast enough for 50M values.
  uint64_t state = 0x9E3779B97F4A7C15ull;
  auto uniform = [&]() {  // in [-1, 1)
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    return static_cast<float>(static_cast<double>(state >> 11) * 0x1p-52 - 1.0);
  };
  for (auto& v : x) v = 1.7320508f * uniform();  // U(-√3, √3): RMS 1
  for (auto& v : W) v = 0.5f * uniform();
  for (auto& t : targets) {
    t = static_cast<int32_t>(std::min<int64_t>(
        o.V - 1, static_cast<int64_t>((uniform() + 1.0f) * 0.5f * static_cast<float>(o.V))));
  }
  std::vector<float> dx(static_cast<size_t>(o.T * o.d), 0.0f);
  std::vector<float> dW(static_cast<size_t>(o.V * o.d), 0.0f);
  FusedLossParams p;
  p.T = o.T;
  p.d = o.d;
  p.V = o.V;
  p.x = x.data();
  p.W = W.data();
  p.targets = targets.data();
  p.fp8 = o.fp8;
  p.loss_scale = 1.0f / static_cast<float>(o.T);
  p.row_block = o.row_block;
  p.precision = o.precision == "bf16" ? nanogpt::Precision::kBf16 : nanogpt::Precision::kFp32;

  // The calls' scratch (logits, gradients, GEMM packing) in a workspace of the benchmark's own,
  // so its peak can be reported.
  nanogpt::Workspace workspace("fused_loss_bench");
  nanogpt::Workspace::Use use_workspace(workspace);
  Result r{};
  r.threads = nanogpt::ThreadPool::current().size();  // starts the pool before the baseline
  r.workspace_bytes =
      fused ? static_cast<int64_t>(nanogpt::fused_linear_cross_entropy_workspace_bytes(p)) : 0;
  r.row_block = fused ? nanogpt::fused_linear_cross_entropy_row_block(p) : 0;
  {
    std::ofstream clear("/proc/self/clear_refs");
    clear << "5";
    clear.flush();
    r.hwm_reset = clear.good() ? 1 : 0;
  }
  r.baseline_rss = status_bytes("VmRSS");
  r.load_before = nanogpt::load_average();

  auto call = [&]() {
    return fused ? nanogpt::fused_linear_cross_entropy_backward(p, dx.data(), dW.data())
                 : nanogpt::linear_cross_entropy_unfused(p, dx.data(), dW.data());
  };
  std::vector<double> seconds;
  for (int i = 0; i < o.warmup + o.repeats; ++i) {
    const auto start = std::chrono::steady_clock::now();
    const double loss = call();
    const double s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (i == 0) {
      // dW accumulates; its norm is meaningful after the first call only.
      r.loss = loss;
      r.dx_norm = norm(dx);
      r.dW_norm = norm(dW);
    }
    if (i >= o.warmup) seconds.push_back(s);
    std::fprintf(stderr, "[%s] call %d/%d: %.3f s, loss %.6f\n", fused ? "fused" : "unfused", i + 1,
                 o.warmup + o.repeats, s, loss / static_cast<double>(o.T));
  }
  std::sort(seconds.begin(), seconds.end());
  r.median_seconds = seconds.size() % 2 == 1
                         ? seconds[seconds.size() / 2]
                         : 0.5 * (seconds[seconds.size() / 2 - 1] + seconds[seconds.size() / 2]);
  r.min_seconds = seconds.front();
  r.max_seconds = seconds.back();
  r.peak_hwm = status_bytes("VmHWM");
  r.workspace_peak_bytes = static_cast<int64_t>(workspace.peak_bytes());
  r.load_after = nanogpt::load_average();
  return r;
}

bool run_child(const Options& o, bool fused, Result& out, int64_t& child_max_rss) {
  int fds[2];
  if (pipe(fds) != 0) {
    std::perror("pipe");
    return false;
  }
  std::fflush(nullptr);
  const pid_t pid = fork();
  if (pid < 0) {
    std::perror("fork");
    return false;
  }
  if (pid == 0) {
    close(fds[0]);
    int code = 0;
    try {
      const Result r = measure(o, fused);
      if (write(fds[1], &r, sizeof r) != static_cast<ssize_t>(sizeof r)) code = 1;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "fused_loss_bench: %s\n", e.what());
      code = 1;
    }
    close(fds[1]);
    std::fflush(nullptr);
    _exit(code);
  }
  close(fds[1]);
  ssize_t got = 0;
  for (;;) {
    const ssize_t n = read(fds[0], reinterpret_cast<char*>(&out) + got, sizeof out - got);
    if (n <= 0) break;
    got += n;
  }
  close(fds[0]);
  int status = 0;
  rusage usage{};
  if (wait4(pid, &status, 0, &usage) != pid) {
    std::perror("wait4");
    return false;
  }
  child_max_rss = static_cast<int64_t>(usage.ru_maxrss) * 1024;  // Linux reports kB
  return got == static_cast<ssize_t>(sizeof out) && WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse(argc, argv);
  std::vector<std::string> modes;
  if (o.mode != "unfused") modes.push_back("fused");
  if (o.mode != "fused") modes.push_back("unfused");
  nlohmann::ordered_json summary = {
      {"T", o.T}, {"V", o.V}, {"d", o.d}, {"fp8", o.fp8}, {"cpu", cpu_model()}};
  for (const std::string& mode : modes) {
    Result r{};
    int64_t child_max_rss = 0;
    if (!run_child(o, mode == "fused", r, child_max_rss)) {
      std::cerr << "fused_loss_bench: the " << mode << " run failed\n";
      return 1;
    }
    const int64_t extra = r.peak_hwm - r.baseline_rss;
    nlohmann::ordered_json line = {
        {"mode", mode},
        {"T", o.T},
        {"V", o.V},
        {"d", o.d},
        {"fp8", o.fp8},
        {"precision", o.precision},
        {"threads", r.threads},
        {"warmup", o.warmup},
        {"repeats", o.repeats},
        {"seconds", r.median_seconds},
        {"seconds_min", r.min_seconds},
        {"seconds_max", r.max_seconds},
        {"peak_extra_bytes", extra},
        {"baseline_rss_bytes", r.baseline_rss},
        {"child_max_rss_bytes", child_max_rss},
        {"hwm_reset", r.hwm_reset == 1},
        {"workspace_peak_bytes", r.workspace_peak_bytes},
        {"loss", r.loss / static_cast<double>(o.T)},
        {"loss_sum", r.loss},
        {"dx_norm", r.dx_norm},
        {"dW_norm", r.dW_norm},
        {"loadavg_before", r.load_before},
        {"loadavg_after", r.load_after},
    };
    if (mode == "fused") {
      line["workspace_bytes"] = r.workspace_bytes;
      line["row_block"] = r.row_block;
    }
    std::cout << line.dump() << std::endl;
    summary[mode + "_seconds"] = r.median_seconds;
    summary[mode + "_peak_extra_bytes"] = extra;
    summary[mode + "_loss"] = r.loss / static_cast<double>(o.T);
  }
  if (modes.size() == 2) {
    summary["time_ratio_unfused_over_fused"] =
        summary["unfused_seconds"].get<double>() / summary["fused_seconds"].get<double>();
    summary["memory_ratio_unfused_over_fused"] =
        static_cast<double>(summary["unfused_peak_extra_bytes"].get<int64_t>()) /
        static_cast<double>(std::max<int64_t>(1, summary["fused_peak_extra_bytes"].get<int64_t>()));
    summary["loss_difference"] =
        summary["unfused_loss"].get<double>() - summary["fused_loss"].get<double>();
  }
  std::cout << summary.dump() << std::endl;
  return 0;
}
