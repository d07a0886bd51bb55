// What a GEMM call costs besides its arithmetic, for the small products of decoding, evaluation
// and the cpu preset (issue 14's small-product path). For the fp32 and bf16 kernels in use, on
// one thread and on the pool:
//   - the micro-kernel's own rate: one MR×NR tile over kc = 256 from L1-resident panels, called
//     back to back (the ceiling a product can approach; per thread);
//   - the fixed cost of a call: the time of products too small to have any arithmetic to speak
//     of (one tile; two tiles, which the pool splits into two tasks);
//   - small products (M×N×K, the weight as B in y = x·Wᵀ) with B packed per call and packed once
//     (kernels/gemm/packed_b.hpp), as GFLOP/s and as a fraction of threads × the kernel's rate.
// Prints one JSON line per figure, with the CPU and the load average. Usage:
//   gemm_call_cost [--threads N] [--min-seconds S]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "kernels/gemm/kernel_rate.hpp"
#include "kernels/gemm/microkernel.hpp"
#include "kernels/gemm/packed_b.hpp"
#include "kernels/matmul.hpp"
#include "runtime/cpu_info.hpp"
#include "runtime/thread_pool.hpp"

namespace {

using namespace nanogpt;
using Clock = std::chrono::steady_clock;

double min_seconds = 0.3;

// Median seconds per call of fn over batches that together take min_seconds.
template <class Fn>
double seconds_per_call(const Fn& fn) {
  for (int i = 0; i < 20; ++i) fn();  // warm up (and let the autotuner settle the shape)
  int per_batch = 1;
  for (;;) {
    const auto t0 = Clock::now();
    for (int i = 0; i < per_batch; ++i) fn();
    if (std::chrono::duration<double>(Clock::now() - t0).count() > 0.01) break;
    per_batch *= 2;
  }
  std::vector<double> samples;
  const auto start = Clock::now();
  while (samples.size() < 5 ||
         std::chrono::duration<double>(Clock::now() - start).count() < min_seconds) {
    const auto t0 = Clock::now();
    for (int i = 0; i < per_batch; ++i) fn();
    samples.push_back(std::chrono::duration<double>(Clock::now() - t0).count() / per_batch);
  }
  std::sort(samples.begin(), samples.end());
  return samples[samples.size() / 2];
}

void print_line(const std::string& body, int threads) {
  std::printf(
      "{\"bench\":\"gemm_call_cost\",%s,\"threads\":%d,\"cpu\":\"%s\",\"load_avg_1m\":%.2f}\n",
      body.c_str(), threads, cpu_info().model_name.c_str(), load_average());
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  int max_threads = ThreadPool::default_threads();
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--threads" && i + 1 < argc) {
      max_threads = std::atoi(argv[++i]);
    } else if (arg == "--min-seconds" && i + 1 < argc) {
      min_seconds = std::atof(argv[++i]);
    } else {
      std::fprintf(stderr, "usage: gemm_call_cost [--threads N] [--min-seconds S]\n");
      return 2;
    }
  }
  if (max_threads < 1 || !(min_seconds > 0)) {
    std::fprintf(stderr, "gemm_call_cost: --threads must be >= 1 and --min-seconds > 0\n");
    return 2;
  }
  struct Shape {
    int64_t M, N, K;
  };
  // One tile; two tiles (two tasks on the pool); the cpu preset's attention projection at the
  // heights a decode step (64 rows), an evaluation batch and a training pass give it.
  const Shape fixed[] = {{1, 32, 32}, {24, 64, 32}};
  const Shape small[] = {{64, 256, 256}, {256, 256, 256}, {512, 256, 256}, {2048, 256, 256}};
  for (const Precision precision : {Precision::kFp32, Precision::kBf16}) {
    const MicroKernel& kernel =
        precision == Precision::kBf16 ? active_bf16_microkernel() : active_microkernel();
    const char* dtype = precision == Precision::kBf16 ? "bf16" : "fp32";
    // The median of 10 ms windows over min_seconds; the slowest and fastest show whether the host
    // changed the kernel's rate meanwhile (kernels/gemm/kernel_rate.hpp).
    const KernelRate rate = measure_kernel_rate(kernel, std::max(min_seconds, 0.05));
    const double peak = rate.median_gflops;
    print_line(std::string("\"figure\":\"microkernel\",\"dtype\":\"") + dtype + "\",\"kernel\":\"" +
                   kernel.isa + "\",\"gflops_per_thread\":" + std::to_string(peak) +
                   ",\"min_gflops\":" + std::to_string(rate.min_gflops) +
                   ",\"max_gflops\":" + std::to_string(rate.max_gflops),
               1);
    std::vector<int> thread_counts = {1};
    if (max_threads > 1) thread_counts.push_back(max_threads);
    for (const int threads : thread_counts) {
      ThreadPool pool(threads);
      const ThreadPool::Use use(pool);
      auto product = [&](const Shape& s, bool packed) {
        std::vector<float> A(static_cast<size_t>(s.M * s.K)), W(static_cast<size_t>(s.N * s.K)),
            C(static_cast<size_t>(s.M * s.N));
        for (size_t i = 0; i < A.size(); ++i) A[i] = static_cast<float>(i % 13) * 0.01f;
        for (size_t i = 0; i < W.size(); ++i) W[i] = static_cast<float>(i % 7) * 0.02f;
        PackedB B;
        pack_matmul_b(precision, Trans::kYes, s.K, s.N, W.data(), s.K, B);
        return seconds_per_call([&] {
          if (packed) {
            matmul(Trans::kNo, s.M, 1.0f, A.data(), s.K, B, 0.0f, C.data(), s.N);
          } else {
            matmul(precision, Trans::kNo, Trans::kYes, s.M, s.N, s.K, 1.0f, A.data(), s.K, W.data(),
                   s.K, 0.0f, C.data(), s.N);
          }
        });
      };
      for (const Shape& s : fixed) {
        for (const bool packed : {false, true}) {
          print_line(std::string("\"figure\":\"fixed_cost\",\"dtype\":\"") + dtype +
                         "\",\"M\":" + std::to_string(s.M) + ",\"N\":" + std::to_string(s.N) +
                         ",\"K\":" + std::to_string(s.K) + ",\"b\":\"" +
                         (packed ? "packed_once" : "packed_per_call") +
                         "\",\"us_per_call\":" + std::to_string(product(s, packed) * 1e6),
                     threads);
        }
      }
      for (const Shape& s : small) {
        for (const bool packed : {false, true}) {
          const double sec = product(s, packed);
          const double gflops = 2.0 * static_cast<double>(s.M * s.N * s.K) / sec * 1e-9;
          print_line(std::string("\"figure\":\"small_product\",\"dtype\":\"") + dtype +
                         "\",\"M\":" + std::to_string(s.M) + ",\"N\":" + std::to_string(s.N) +
                         ",\"K\":" + std::to_string(s.K) + ",\"b\":\"" +
                         (packed ? "packed_once" : "packed_per_call") + "\",\"us_per_call\":" +
                         std::to_string(sec * 1e6) + ",\"gflops\":" + std::to_string(gflops) +
                         ",\"of_kernel_rate\":" + std::to_string(gflops / (peak * threads)),
                     threads);
        }
      }
    }
  }
  return 0;
}
