// The machine's ceiling: how many FLOPs per second each multiply-add instruction the GEMM
// kernels use can retire when nothing else limits it (operands in registers, enough
// independent accumulators to hide the latency). Every GEMM rate elsewhere is a fraction of
// one of these, which is what tells "our kernel is slow" apart from "no kernel can go faster
// on this CPU".
//
//   peak_flops [--threads N] [--seconds S] [--json]
//
// For each instruction the CPU has — VFMADD231PS on ymm (AVX2) and zmm (AVX-512F), VDPBF16PS
// on zmm (AVX512-BF16) and TDPBF16PS (AMX-BF16) — it times a loop of independent
// multiply-adds on one thread and on N threads (each thread its own loop, started together),
// and prints GFLOP/s, instructions per nanosecond per thread and the implied FLOPs per cycle
// at the measured clock (estimated from a dependent chain of integer adds, one per cycle).
#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "runtime/amx_permission.hpp"
#include "runtime/cpu_info.hpp"
#include "runtime/thread_pool.hpp"

namespace {

// Each loop body issues kChains independent instructions kUnroll times; kChains is more than
// latency × throughput of any of these instructions on current cores (FMA: 4 × 2; VDPBF16PS:
// 6 × 2), so the loop measures throughput, not latency.
constexpr int kChains = 12;
constexpr int64_t kIters = 1 << 16;

__attribute__((target("avx2,fma"), noinline)) double fma_ymm(int64_t iters) {
  __m256 acc[kChains];
  for (int i = 0; i < kChains; ++i) acc[i] = _mm256_set1_ps(0.001f * static_cast<float>(i));
  const __m256 a = _mm256_set1_ps(0.999f), b = _mm256_set1_ps(1e-6f);
  for (int64_t it = 0; it < iters; ++it) {
#pragma GCC unroll 16
    for (int i = 0; i < kChains; ++i) acc[i] = _mm256_fmadd_ps(acc[i], a, b);
  }
  __m256 s = acc[0];
  for (int i = 1; i < kChains; ++i) s = _mm256_add_ps(s, acc[i]);
  return static_cast<double>(_mm256_cvtss_f32(s));
}

__attribute__((target("avx512f"), noinline)) double fma_zmm(int64_t iters) {
  __m512 acc[kChains];
  for (int i = 0; i < kChains; ++i) acc[i] = _mm512_set1_ps(0.001f * static_cast<float>(i));
  const __m512 a = _mm512_set1_ps(0.999f), b = _mm512_set1_ps(1e-6f);
  for (int64_t it = 0; it < iters; ++it) {
#pragma GCC unroll 16
    for (int i = 0; i < kChains; ++i) acc[i] = _mm512_fmadd_ps(acc[i], a, b);
  }
  __m512 s = acc[0];
  for (int i = 1; i < kChains; ++i) s = _mm512_add_ps(s, acc[i]);
  return static_cast<double>(_mm512_cvtss_f32(s));
}

__attribute__((target("avx512f,avx512bf16"), noinline)) double dpbf16_zmm(int64_t iters) {
  __m512 acc[kChains];
  for (int i = 0; i < kChains; ++i) acc[i] = _mm512_set1_ps(0.001f * static_cast<float>(i));
  const __m512bh a = _mm512_cvtne2ps_pbh(_mm512_set1_ps(0.5f), _mm512_set1_ps(0.25f));
  const __m512bh b = _mm512_cvtne2ps_pbh(_mm512_set1_ps(1e-3f), _mm512_set1_ps(-1e-3f));
  for (int64_t it = 0; it < iters; ++it) {
#pragma GCC unroll 16
    for (int i = 0; i < kChains; ++i) acc[i] = _mm512_dpbf16_ps(acc[i], a, b);
  }
  __m512 s = acc[0];
  for (int i = 1; i < kChains; ++i) s = _mm512_add_ps(s, acc[i]);
  return static_cast<double>(_mm512_cvtss_f32(s));
}

struct alignas(64) TileConfig {
  uint8_t palette = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

// Four 16×16 fp32 accumulators fed by two A and two B tiles, as the GEMM's AMX kernel does,
// without the loads: 4 TDPBF16PS per iteration, each 16·16·32·2 FLOPs.
__attribute__((target("amx-tile,amx-bf16"), noinline)) double tdpbf16(int64_t iters) {
  TileConfig config;
  for (int t = 0; t < 8; ++t) {
    config.colsb[t] = 64;
    config.rows[t] = 16;
  }
  __asm__ volatile("ldtilecfg %0" : : "m"(config));
  alignas(64) static thread_local uint16_t zeros[16 * 32] = {};
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
  _tile_loadd(4, zeros, 64);
  _tile_loadd(5, zeros, 64);
  _tile_loadd(6, zeros, 64);
  _tile_loadd(7, zeros, 64);
  for (int64_t it = 0; it < iters; ++it) {
    _tile_dpbf16ps(0, 4, 6);
    _tile_dpbf16ps(1, 4, 7);
    _tile_dpbf16ps(2, 5, 6);
    _tile_dpbf16ps(3, 5, 7);
  }
  alignas(64) static thread_local float out[16 * 16];
  _tile_stored(0, out, 64);
  _tile_release();
  return static_cast<double>(out[0]);
}

// A dependent chain of one-cycle integer adds: iterations per second is the core clock.
__attribute__((noinline)) uint64_t add_chain(int64_t iters) {
  uint64_t x = 1;
  for (int64_t i = 0; i < iters; ++i) {
    __asm__ volatile("add $1, %0\n\tadd $1, %0\n\tadd $1, %0\n\tadd $1, %0" : "+r"(x));
  }
  return x;
}

struct Instruction {
  const char* name;
  const char* isa;
  double flops_per_instruction;
  int instructions_per_iteration;
  std::function<double(int64_t)> loop;
  bool available;
};

double seconds_of(const std::function<void()>& fn) {
  const auto t0 = std::chrono::steady_clock::now();
  fn();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Iterations of `loop` per second on each of `threads` threads running it at once: the best
// of several rounds of about `seconds` each.
double iterations_per_second(const std::function<double(int64_t)>& loop, int threads,
                             double seconds) {
  std::atomic<double> sink{0};
  // Calibrate the round length on one thread.
  int64_t iters = kIters;
  while (seconds_of([&] { sink = sink + loop(iters); }) < 0.02) iters *= 2;
  const double per_iter =
      seconds_of([&] { sink = sink + loop(iters); }) / static_cast<double>(iters);
  const int64_t round_iters =
      std::max<int64_t>(kIters, static_cast<int64_t>(seconds / 5 / per_iter));
  double best = 0;
  for (int round = 0; round < 5; ++round) {
    std::vector<double> rates(static_cast<size_t>(threads));
    std::atomic<int> ready{0};
    auto body = [&](int t) {
      ready.fetch_add(1);
      while (ready.load() < threads) {
      }
      const double s = seconds_of([&] { sink = sink + loop(round_iters); });
      rates[static_cast<size_t>(t)] = static_cast<double>(round_iters) / s;
    };
    std::vector<std::thread> others;
    for (int t = 1; t < threads; ++t) others.emplace_back(body, t);
    body(0);
    for (auto& th : others) th.join();
    // The slowest thread bounds what a parallel kernel gets.
    best = std::max(best, *std::min_element(rates.begin(), rates.end()));
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  int threads = nanogpt::ThreadPool::default_threads();
  double seconds = 1.0;
  bool json = false;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--threads" && i + 1 < argc) {
      threads = std::atoi(argv[++i]);
    } else if (arg == "--seconds" && i + 1 < argc) {
      seconds = std::atof(argv[++i]);
    } else if (arg == "--json") {
      json = true;
    } else {
      std::fprintf(stderr,
                   "peak_flops: unknown argument %s\nusage: peak_flops [--threads N] [--seconds S] "
                   "[--json]\n",
                   arg.c_str());
      return 2;
    }
  }
  if (threads < 1 || seconds <= 0) {
    std::fprintf(stderr, "peak_flops: --threads must be >= 1 and --seconds > 0\n");
    return 2;
  }
  const nanogpt::CpuInfo& cpu = nanogpt::cpu_info();
  const bool amx = cpu.amx_tile && cpu.amx_bf16 && nanogpt::amx_permission().granted;
  const std::vector<Instruction> instructions = {
      {"vfmadd231ps ymm", "avx2", 16, kChains, fma_ymm, cpu.avx2 && cpu.fma},
      {"vfmadd231ps zmm", "avx512", 32, kChains, fma_zmm, cpu.avx512f},
      {"vdpbf16ps zmm", "avx512_bf16", 64, kChains, dpbf16_zmm, cpu.avx512f && cpu.avx512_bf16},
      {"tdpbf16ps", "amx", 16.0 * 16 * 32 * 2, 4, tdpbf16, amx},
  };
  const double load_before = nanogpt::load_average();
  // Four adds per iteration, one cycle each.
  const double ghz = 4.0 * iterations_per_second(add_chain, 1, seconds) / 1e9;
  if (!json) {
    std::printf("cpu: %s, %d threads, clock ~%.2f GHz (dependent adds), load %.2f\n",
                cpu.model_name.c_str(), threads, ghz, load_before);
    std::printf("%-18s %8s | %10s %9s %11s | %12s\n", "instruction", "flops/i", "1T GFLOP/s",
                "instr/ns", "flops/cycle", "NT GFLOP/s");
  }
  for (const Instruction& ins : instructions) {
    if (!ins.available) {
      if (!json) std::printf("%-18s   (not on this CPU)\n", ins.name);
      continue;
    }
    const double per_iter_flops = ins.flops_per_instruction * ins.instructions_per_iteration;
    const double one = iterations_per_second(ins.loop, 1, seconds);
    const double all = threads > 1 ? iterations_per_second(ins.loop, threads, seconds) : one;
    const double gflops1 = one * per_iter_flops / 1e9;
    const double gflops_all = all * per_iter_flops / 1e9 * threads;
    const double instr_per_ns = one * ins.instructions_per_iteration / 1e9;
    if (json) {
      std::printf(
          "{\"bench\":\"peak_flops\",\"instruction\":\"%s\",\"isa\":\"%s\",\"flops_per_instr\":%."
          "0f,"
          "\"gflops_1thread\":%.1f,\"instr_per_ns\":%.3f,\"flops_per_cycle\":%.1f,"
          "\"threads\":%d,\"gflops_all_threads\":%.1f,\"clock_ghz\":%.3f,\"cpu\":\"%s\","
          "\"loadavg\":%.2f}\n",
          ins.name, ins.isa, ins.flops_per_instruction, gflops1, instr_per_ns, gflops1 / ghz,
          threads, gflops_all, ghz, cpu.model_name.c_str(), load_before);
    } else {
      std::printf("%-18s %8.0f | %10.1f %9.3f %11.1f | %12.1f\n", ins.name,
                  ins.flops_per_instruction, gflops1, instr_per_ns, gflops1 / ghz, gflops_all);
    }
    std::fflush(stdout);
  }
  return 0;
}
