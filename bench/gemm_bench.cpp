// GEMM throughput of our own kernels on the shapes of training, one JSON line per
// (shape, kernel, dtype): every fp32 and bf16 kernel this CPU can run, GFLOP/s best and median.
// (gemm_vs_peers compares against OpenBLAS and oneDNN.)
//
//   gemm_bench [--preset cpu|speedrun|all] [--threads N] [--dtype fp32|bf16|both]
//              [--kernel NAME] [--trans natural|all] [--tune] [--min-seconds S]
//
// --tune also times every blocking candidate and reports the best one's name and speed.
// gflops_cpu_time divides by the process's CPU time per thread instead of wall time: on a
// shared machine, an estimate of the speed with the cores to ourselves.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "kernels/bf16.hpp"
#include "kernels/gemm.hpp"
#include "kernels/gemm/blocking.hpp"
#include "kernels/gemm/driver.hpp"
#include "kernels/gemm/microkernel.hpp"
#include "runtime/cpu_info.hpp"
#include "runtime/thread_pool.hpp"

namespace {

using nanogpt::GemmBlocking;
using nanogpt::MicroKernel;
using nanogpt::PackSource;
using nanogpt::Trans;

struct Shape {
  const char* preset;
  const char* op;
  int64_t M, N, K;
  Trans ta, tb;
};

// T = 512, d = 256 (cpu) and T = 2048, d = 768 (speedrun): forward X·Wᵀ (NT), input gradient
// dY·W (NN) and weight gradient dYᵀ·X (TN, accumulating).
const std::vector<Shape> kShapes = {
    {"cpu", "qkv_fwd", 512, 768, 256, Trans::kNo, Trans::kYes},
    {"cpu", "proj_fwd", 512, 256, 256, Trans::kNo, Trans::kYes},
    {"cpu", "fc_fwd", 512, 1024, 256, Trans::kNo, Trans::kYes},
    {"cpu", "mlp_proj_fwd", 512, 256, 1024, Trans::kNo, Trans::kYes},
    {"cpu", "fc_dgrad", 512, 256, 1024, Trans::kNo, Trans::kNo},
    {"cpu", "mlp_proj_wgrad", 256, 1024, 512, Trans::kYes, Trans::kNo},
    {"cpu", "fc_wgrad", 1024, 256, 512, Trans::kYes, Trans::kNo},
    {"cpu", "qkv_wgrad", 768, 256, 512, Trans::kYes, Trans::kNo},
    {"cpu", "lm_head_fwd", 512, 8192, 256, Trans::kNo, Trans::kYes},
    {"cpu", "proj_wgrad", 256, 256, 256, Trans::kYes, Trans::kNo},
    {"speedrun", "qkv_fwd", 2048, 2304, 768, Trans::kNo, Trans::kYes},
    {"speedrun", "proj_fwd", 2048, 768, 768, Trans::kNo, Trans::kYes},
    {"speedrun", "fc_fwd", 2048, 3072, 768, Trans::kNo, Trans::kYes},
    {"speedrun", "mlp_proj_fwd", 2048, 768, 3072, Trans::kNo, Trans::kYes},
    {"speedrun", "fc_dgrad", 2048, 768, 3072, Trans::kNo, Trans::kNo},
    {"speedrun", "mlp_proj_wgrad", 768, 3072, 2048, Trans::kYes, Trans::kNo},
    {"speedrun", "fc_wgrad", 3072, 768, 2048, Trans::kYes, Trans::kNo},
    {"speedrun", "lm_head_fwd", 2048, 50304, 768, Trans::kNo, Trans::kYes},
};

[[noreturn]] void usage(const std::string& problem) {
  std::fprintf(stderr,
               "gemm_bench: %s\nusage: gemm_bench [--preset cpu|speedrun|all] [--threads N] "
               "[--dtype fp32|bf16|both] [--kernel NAME] [--trans natural|all] [--tune] "
               "[--min-seconds S]\n",
               problem.c_str());
  std::exit(2);
}

double process_cpu_seconds() {
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

// Seconds of each timed run: a warm-up first, then runs until min_seconds have passed
// (at least 3). cpu_per_run: the process's CPU seconds per run, which on a shared machine
// says what the kernels would do with the cores to themselves.
std::vector<double> time_runs(const std::function<void()>& fn, double min_seconds,
                              double* cpu_per_run) {
  using clock = std::chrono::steady_clock;
  fn();
  std::vector<double> out;
  const double cpu0 = process_cpu_seconds();
  const auto start = clock::now();
  while (out.size() < 3 ||
         std::chrono::duration<double>(clock::now() - start).count() < min_seconds) {
    const auto t0 = clock::now();
    fn();
    out.push_back(std::chrono::duration<double>(clock::now() - t0).count());
    if (out.size() >= 200) break;
  }
  *cpu_per_run = (process_cpu_seconds() - cpu0) / static_cast<double>(out.size());
  std::sort(out.begin(), out.end());
  return out;
}

const char* tname(Trans t) {
  return t == Trans::kNo ? "N" : "T";
}

}  // namespace

int main(int argc, char** argv) {
  std::string preset = "all", dtype = "both", only_kernel, trans_mode = "natural";
  int threads = nanogpt::ThreadPool::default_threads();
  bool tune = false;
  double min_seconds = 0.3;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) usage(arg + " needs a value");
      return argv[++i];
    };
    if (arg == "--preset") {
      preset = value();
    } else if (arg == "--threads") {
      threads = std::atoi(value().c_str());
    } else if (arg == "--dtype") {
      dtype = value();
    } else if (arg == "--kernel") {
      only_kernel = value();
    } else if (arg == "--trans") {
      trans_mode = value();
    } else if (arg == "--tune") {
      tune = true;
    } else if (arg == "--min-seconds") {
      min_seconds = std::atof(value().c_str());
    } else {
      usage("unknown argument " + arg);
    }
  }
  if (preset != "cpu" && preset != "speedrun" && preset != "all") usage("bad --preset " + preset);
  if (dtype != "fp32" && dtype != "bf16" && dtype != "both") usage("bad --dtype " + dtype);
  if (trans_mode != "natural" && trans_mode != "all") usage("bad --trans " + trans_mode);
  if (threads < 1) usage("bad --threads");

  nanogpt::ThreadPool pool(threads);
  nanogpt::ThreadPool::Use use(pool);

  struct Variant {
    MicroKernel kernel;
    const char* dtype;
    const char* storage;
    PackSource source;
  };
  std::vector<Variant> variants;
  if (dtype != "bf16") {
    for (const MicroKernel& k : nanogpt::available_microkernels())
      variants.push_back({k, "fp32", "f32", PackSource::kF32});
  }
  if (dtype != "fp32") {
    for (const MicroKernel& k : nanogpt::available_bf16_microkernels()) {
      variants.push_back({k, "bf16", "f32", PackSource::kF32ToBf16});
      variants.push_back({k, "bf16", "bf16", PackSource::kBf16});
    }
  }

  std::mt19937 rng(1);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (const Shape& s : kShapes) {
    if (preset != "all" && preset != s.preset) continue;
    std::vector<std::pair<Trans, Trans>> transes = {{s.ta, s.tb}};
    if (trans_mode == "all") {
      transes = {{Trans::kNo, Trans::kNo},
                 {Trans::kNo, Trans::kYes},
                 {Trans::kYes, Trans::kNo},
                 {Trans::kYes, Trans::kYes}};
    }
    std::vector<float> A(static_cast<size_t>(s.M * s.K)), B(static_cast<size_t>(s.K * s.N));
    std::vector<float> C(static_cast<size_t>(s.M * s.N), 0.0f);
    for (auto& x : A) x = u(rng);
    for (auto& x : B) x = u(rng);
    std::vector<nanogpt::bf16> A16(A.size()), B16(B.size());
    for (size_t i = 0; i < A.size(); ++i) A16[i] = nanogpt::to_bf16(A[i]);
    for (size_t i = 0; i < B.size(); ++i) B16[i] = nanogpt::to_bf16(B[i]);
    const double flops = 2.0 * static_cast<double>(s.M) * s.N * s.K;
    for (const auto& [ta, tb] : transes) {
      const int64_t lda = ta == Trans::kNo ? s.K : s.M;
      const int64_t ldb = tb == Trans::kNo ? s.N : s.K;
      // Weight gradients accumulate (beta = 1), the others overwrite.
      const float beta = ta == Trans::kYes ? 1.0f : 0.0f;
      for (const Variant& v : variants) {
        if (!only_kernel.empty() && only_kernel != v.kernel.isa) continue;
        const void* a =
            v.source == PackSource::kBf16 ? static_cast<const void*>(A16.data()) : A.data();
        const void* b =
            v.source == PackSource::kBf16 ? static_cast<const void*>(B16.data()) : B.data();
        double cpu_per_run = 0, cpu_candidate = 0;
        auto run_with = [&](const GemmBlocking& blocking) {
          return time_runs(
              [&] {
                nanogpt::gemm_run(v.kernel, blocking, v.source, ta, tb, s.M, s.N, s.K, 1.0f, a, lda,
                                  b, ldb, beta, C.data(), s.N, nullptr);
              },
              min_seconds, &cpu_candidate);
        };
        GemmBlocking best = nanogpt::default_blocking(v.kernel, s.M, s.N, s.K, threads);
        std::vector<double> times = run_with(best);
        cpu_per_run = cpu_candidate;
        const double default_best = times.front();
        if (tune) {
          for (const GemmBlocking& cand :
               nanogpt::blocking_candidates(v.kernel, s.M, s.N, s.K, threads)) {
            std::vector<double> t = run_with(cand);
            if (t.front() < times.front()) {
              times = t;
              best = cand;
              cpu_per_run = cpu_candidate;
            }
          }
        }
        const double median = times[times.size() / 2];
        std::printf(
            "{\"bench\":\"gemm\",\"preset\":\"%s\",\"op\":\"%s\",\"M\":%lld,\"N\":%lld,\"K\":%lld,"
            "\"trans\":\"%s%s\",\"dtype\":\"%s\",\"storage\":\"%s\",\"kernel\":\"%s\","
            "\"tile\":\"%lldx%lld\",\"threads\":%d,\"blocking\":\"%s\",\"ms_best\":%.4f,"
            "\"gflops_best\":%.1f,\"gflops_median\":%.1f,\"gflops_default_blocking\":%.1f,"
            "\"gflops_cpu_time\":%.1f,\"runs\":%zu,\"load_avg_1m\":%.2f}\n",
            s.preset, s.op, static_cast<long long>(s.M), static_cast<long long>(s.N),
            static_cast<long long>(s.K), tname(ta), tname(tb), v.dtype, v.storage, v.kernel.isa,
            static_cast<long long>(v.kernel.mr), static_cast<long long>(v.kernel.nr), threads,
            best.name().c_str(), times.front() * 1e3, flops / times.front() * 1e-9,
            flops / median * 1e-9, flops / default_best * 1e-9,
            flops / cpu_per_run * 1e-9 * threads, times.size(), nanogpt::load_average());
        std::fflush(stdout);
      }
    }
  }
  return 0;
}
