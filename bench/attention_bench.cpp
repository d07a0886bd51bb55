// Time of the tiled attention, forward and backward, on the model's shapes, fp32 and bf16.
//
//   attention_bench [--preset cpu|speedrun|step|cached|all] [--precision fp32|bf16|both]
//                   [--warmup 1] [--repeats 5] [--threads N] [--packed-budget BYTES]
//                   [--kv-heads N] [--stored-gradient-budget BYTES]
//
// cpu: T = 512, H = 2, D = 128, one document, a window of 4 blocks of 128 (the whole sequence).
// speedrun: T = 1024, H = 6, D = 128, one document, a window of 8 blocks (the whole sequence).
// step: the calls a training step of the cpu model makes at 8 sequences of 1,024 tokens
// (train_vs_pytorch.py's shape): T = 8192 in 8 documents of 1,024, H = 2, D = 128, the long
// window (8 blocks, "step") and the short one (4, "step_short"). Its operands are given as
// training stores them: in bf16, q, k, v and dO in bf16 only, and the forward writes only the
// rounded output, which the backward reads (attention.hpp); in fp32, as fp32. The other
// presets give fp32 operands in both precisions (the packers round them in bf16), as they did
// before training stored its operands in bf16; each line says which ("inputs").
// cached: the forward alone of a few queries over a K/V cache, the calls an evaluation makes
// (cpu preset's heads; a fortunes-choice ending is ~10 tokens after a ~10-token context, a
// prompt ~20): T = 1, 10 and 20 new queries after T_kv − T cached positions, reported in
// microseconds per call over 2,000 calls, where per-call costs (packing, setup) show.
// --kv-heads N: grouped-query attention with N key/value heads (must divide H of every preset
// run; default: H, multi-head); the FLOP counts are those of H query heads either way.
// --stored-gradient-budget BYTES: the score gradients the backward may keep per group of heads
// (set_attention_stored_gradient_budget); 0 makes the query-tile tasks recompute them.
// Prints one JSON line per (preset, precision): best and median milliseconds of the forward,
// the backward and both, and effective GFLOP/s. "Effective" counts only the (query, key) pairs
// the mask leaves visible and only the products the math needs: 4 FLOPs per pair and head
// dimension forward (Q·Kᵀ, P·V), 10 backward (Q·Kᵀ, dO·Vᵀ, Pᵀ·dO, dSᵀ·Q, dS·K), so the figure
// does not reward recomputation or work spent on masked entries. The machine is shared: each
// line carries the load average before and after, and the process CPU time of each phase
// (*_cpu_ms, all threads; the pool's workers sleep rather than spin when idle), which waiting
// for a core does not inflate: with --threads 1 it is the figure to compare under load.
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "kernels/attention.hpp"
#include "kernels/attention_internal.hpp"
#include "kernels/bf16.hpp"
#include "kernels/gemm/microkernel.hpp"
#include "runtime/cpu_info.hpp"
#include "runtime/thread_pool.hpp"

namespace {

using nanogpt::AttentionParams;
using nanogpt::Precision;

struct Options {
  std::string preset = "all", precision = "both";
  int warmup = 1, repeats = 5, threads = 0;
  int64_t packed_budget = 0;            // 0: the library's default
  int64_t kv_heads = 0;                 // 0: H
  int64_t stored_gradient_budget = -1;  // -1: the library's default; 0: recompute dS
};

[[noreturn]] void usage(const std::string& problem) {
  std::cerr << "attention_bench: " << problem << "\n"
            << "usage: attention_bench [--preset cpu|speedrun|step|cached|all] "
               "[--precision fp32|bf16|both] "
               "[--warmup N] [--repeats N] [--threads N] [--packed-budget BYTES] [--kv-heads N] "
               "[--stored-gradient-budget BYTES]\n";
  std::exit(2);
}

int64_t parse_count(const std::string& flag, const char* text, int64_t min, int64_t max = 1000000) {
  char* end = nullptr;
  const long long v = std::strtoll(text, &end, 10);
  if (end == text || *end != '\0' || v < min || v > max) {
    usage(flag + " wants a whole number in [" + std::to_string(min) + ", " + std::to_string(max) +
          "], got '" + text + "'");
  }
  return v;
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (i + 1 >= argc) usage(a + " needs a value");
    const char* v = argv[++i];
    if (a == "--preset") {
      o.preset = v;
      if (o.preset != "cpu" && o.preset != "speedrun" && o.preset != "step" &&
          o.preset != "cached" && o.preset != "all") {
        usage("bad --preset");
      }
    } else if (a == "--precision") {
      o.precision = v;
      if (o.precision != "fp32" && o.precision != "bf16" && o.precision != "both") {
        usage("bad --precision");
      }
    } else if (a == "--warmup") {
      o.warmup = static_cast<int>(parse_count(a, v, 0));
    } else if (a == "--repeats") {
      o.repeats = static_cast<int>(parse_count(a, v, 1));
    } else if (a == "--threads") {
      o.threads = static_cast<int>(parse_count(a, v, 1, 1024));
    } else if (a == "--packed-budget") {
      o.packed_budget = parse_count(a, v, 1, int64_t{1} << 40);
    } else if (a == "--stored-gradient-budget") {
      o.stored_gradient_budget = parse_count(a, v, 0, int64_t{1} << 40);
    } else if (a == "--kv-heads") {
      o.kv_heads = parse_count(a, v, 1, 1024);
    } else {
      usage("unknown flag " + a);
    }
  }
  return o;
}

double cpu_ms() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) * 1e3 + static_cast<double>(ts.tv_nsec) * 1e-6;
}

struct Shape {
  const char* name;
  int64_t T, H, D, W;
  int64_t doc_len;       // tokens per document (T: one document)
  bool stored_as_model;  // operands given as training stores them (the step preset)
};

// Visible (query, key) pairs of one head, from the mask's definition.
double visible_pairs(const AttentionParams& p) {
  double pairs = 0;
  for (int64_t i = 0; i < p.T; ++i) {
    for (int64_t j = 0; j <= i; ++j) {
      pairs += p.doc[i] == p.doc[j] && i / p.block_size - j / p.block_size < p.window_blocks;
    }
  }
  return pairs;
}

struct Stats {
  double best = 0, median = 0;
};

Stats stats(std::vector<double> ms) {
  std::sort(ms.begin(), ms.end());
  return {ms.front(), ms[ms.size() / 2]};
}

nlohmann::json run(const Shape& s, Precision precision, const Options& o) {
  const int64_t T = s.T, H = s.H, D = s.D;
  const int64_t H_kv = o.kv_heads > 0 ? o.kv_heads : H, ld = (H + 2 * H_kv) * D;
  if (H % H_kv != 0) {
    usage("--kv-heads " + std::to_string(H_kv) + " does not divide H = " + std::to_string(H) +
          " of preset " + s.name);
  }
  std::mt19937 rng(1234);
  std::normal_distribution<float> qk(0.0f, 1.0f);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> qkv(static_cast<size_t>(T * ld)), dout(static_cast<size_t>(T * H * D));
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t c = 0; c < ld; ++c) qkv[t * ld + c] = c < (H + H_kv) * D ? qk(rng) : u(rng);
  }
  for (float& x : dout) x = u(rng);
  std::vector<int32_t> doc(static_cast<size_t>(T));
  for (int64_t t = 0; t < T; ++t) doc[static_cast<size_t>(t)] = static_cast<int32_t>(t / s.doc_len);
  const bool bf16 = precision == Precision::kBf16;
  // Stored in bf16 only, as training with bf16 products keeps them.
  const bool bf16_inputs = s.stored_as_model && bf16;
  std::vector<nanogpt::bf16> qkv_bf16, dout_bf16, out_bf16;
  if (bf16_inputs) {
    qkv_bf16.resize(qkv.size());
    dout_bf16.resize(dout.size());
    out_bf16.resize(dout.size());
    nanogpt::round_to_bf16(qkv.data(), static_cast<int64_t>(qkv.size()), qkv_bf16.data());
    nanogpt::round_to_bf16(dout.data(), static_cast<int64_t>(dout.size()), dout_bf16.data());
  }
  AttentionParams p;
  p.T = T;
  p.H = H;
  p.H_kv = H_kv;
  p.D = D;
  if (bf16_inputs) {
    p.q_bf16 = qkv_bf16.data();
    p.k_bf16 = qkv_bf16.data() + H * D;
    p.v_bf16 = qkv_bf16.data() + (H + H_kv) * D;
  } else {
    p.q = qkv.data();
    p.k = qkv.data() + H * D;
    p.v = qkv.data() + (H + H_kv) * D;
  }
  p.ld = ld;
  p.doc = doc.data();
  p.window_blocks = s.W;
  p.block_size = 128;
  p.scale = 0.12f;
  p.precision = precision;
  std::vector<float> out(static_cast<size_t>(T * H * D)), lse(static_cast<size_t>(H * T));
  std::vector<float> grads(static_cast<size_t>(T * ld));

  const double load_before = nanogpt::load_average();
  using Clock = std::chrono::steady_clock;
  std::vector<double> fwd, bwd, both, fwd_cpu, bwd_cpu;
  for (int rep = 0; rep < o.warmup + o.repeats; ++rep) {
    const double c0 = cpu_ms();
    const auto t0 = Clock::now();
    if (bf16_inputs) {
      nanogpt::attention_forward(p, nullptr, lse.data(), out_bf16.data());
    } else {
      nanogpt::attention_forward(p, out.data(), lse.data());
    }
    const auto t1 = Clock::now();
    const double c1 = cpu_ms();
    if (bf16_inputs) {
      nanogpt::attention_backward(p, nullptr, lse.data(), nullptr, grads.data(),
                                  grads.data() + H * D, grads.data() + (H + H_kv) * D,
                                  dout_bf16.data(), out_bf16.data());
    } else {
      nanogpt::attention_backward(p, out.data(), lse.data(), dout.data(), grads.data(),
                                  grads.data() + H * D, grads.data() + (H + H_kv) * D);
    }
    const auto t2 = Clock::now();
    const double c2 = cpu_ms();
    if (rep < o.warmup) continue;
    fwd.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
    bwd.push_back(std::chrono::duration<double, std::milli>(t2 - t1).count());
    both.push_back(std::chrono::duration<double, std::milli>(t2 - t0).count());
    fwd_cpu.push_back(c1 - c0);
    bwd_cpu.push_back(c2 - c1);
  }
  const double load_after = nanogpt::load_average();

  const double pair_dims = visible_pairs(p) * static_cast<double>(H * D);
  const Stats f = stats(fwd), b = stats(bwd), fb = stats(both);
  auto gflops = [](double flops, double ms) { return flops / (ms * 1e6); };
  return {
      {"bench", "attention"},
      {"preset", s.name},
      {"T", T},
      {"H", H},
      {"H_kv", H_kv},
      {"D", D},
      {"window_blocks", s.W},
      {"documents", T / s.doc_len},
      {"precision", bf16 ? "bf16" : "fp32"},
      {"inputs", bf16_inputs ? "bf16" : "fp32"},
      {"kernel", bf16 ? nanogpt::active_bf16_microkernel().isa : nanogpt::active_microkernel().isa},
      {"threads", nanogpt::ThreadPool::current().size()},
      {"repeats", o.repeats},
      {"fwd_ms", f.best},
      {"fwd_ms_median", f.median},
      {"bwd_ms", b.best},
      {"bwd_ms_median", b.median},
      {"fwd_bwd_ms", fb.best},
      {"fwd_bwd_ms_median", fb.median},
      {"fwd_cpu_ms", stats(fwd_cpu).best},
      {"bwd_cpu_ms", stats(bwd_cpu).best},
      {"fwd_gflops", gflops(4 * pair_dims, f.best)},
      {"bwd_gflops", gflops(10 * pair_dims, b.best)},
      {"fwd_bwd_gflops", gflops(14 * pair_dims, fb.best)},
      {"loadavg_before", load_before},
      {"loadavg_after", load_after}};
}

// The forward of T queries over T_kv positions (the last T are the queries'), one document,
// no window: each call as a cached forward makes it, timed over many calls.
nlohmann::json run_cached(int64_t T, int64_t T_kv, Precision precision, const Options& o) {
  constexpr int64_t H = 2, D = 128, kCalls = 2000;
  std::mt19937 rng(1234);
  std::normal_distribution<float> qk(0.0f, 1.0f);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> q(static_cast<size_t>(T * H * D)), k(static_cast<size_t>(T_kv * H * D)),
      v(static_cast<size_t>(T_kv * H * D));
  for (float& x : q) x = qk(rng);
  for (float& x : k) x = qk(rng);
  for (float& x : v) x = u(rng);
  std::vector<int32_t> doc(static_cast<size_t>(T_kv), 0);
  const AttentionParams p{.T = T,
                          .T_kv = T_kv,
                          .H = H,
                          .D = D,
                          .q = q.data(),
                          .k = k.data(),
                          .v = v.data(),
                          .ld_q = H * D,
                          .ld_kv = H * D,
                          .doc = doc.data(),
                          .window_blocks = T_kv / 128 + 1,  // no window
                          .block_size = 128,
                          .scale = 0.12f,
                          .precision = precision};
  std::vector<float> out(static_cast<size_t>(T * H * D)), lse(static_cast<size_t>(H * T));
  const double load_before = nanogpt::load_average();
  using Clock = std::chrono::steady_clock;
  std::vector<double> us;
  for (int rep = 0; rep < o.warmup + o.repeats; ++rep) {
    const auto t0 = Clock::now();
    for (int64_t c = 0; c < kCalls; ++c) nanogpt::attention_forward(p, out.data(), lse.data());
    const double per_call =
        std::chrono::duration<double, std::micro>(Clock::now() - t0).count() / kCalls;
    if (rep >= o.warmup) us.push_back(per_call);
  }
  const double load_after = nanogpt::load_average();
  // Query i sits at position T_kv − T + i and sees every position up to its own.
  double pairs = 0;
  for (int64_t i = 0; i < T; ++i) pairs += static_cast<double>(T_kv - T + i + 1);
  const Stats st = stats(us);
  const bool bf16 = precision == Precision::kBf16;
  return {
      {"bench", "attention"},
      {"preset", "cached"},
      {"T", T},
      {"T_kv", T_kv},
      {"H", H},
      {"D", D},
      {"precision", bf16 ? "bf16" : "fp32"},
      {"kernel", bf16 ? nanogpt::active_bf16_microkernel().isa : nanogpt::active_microkernel().isa},
      {"threads", nanogpt::ThreadPool::current().size()},
      {"calls", kCalls},
      {"repeats", o.repeats},
      {"fwd_us_per_call", st.best},
      {"fwd_us_per_call_median", st.median},
      {"fwd_gflops", 4 * pairs * H * D / (st.best * 1e3)},
      {"loadavg_before", load_before},
      {"loadavg_after", load_after}};
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse(argc, argv);
  std::vector<Shape> shapes;
  if (o.preset == "cpu" || o.preset == "all") shapes.push_back({"cpu", 512, 2, 128, 4, 512, false});
  if (o.preset == "speedrun" || o.preset == "all") {
    shapes.push_back({"speedrun", 1024, 6, 128, 8, 1024, false});
  }
  if (o.preset == "step" || o.preset == "all") {
    shapes.push_back({"step", 8192, 2, 128, 8, 1024, true});
    shapes.push_back({"step_short", 8192, 2, 128, 4, 1024, true});
  }
  std::vector<Precision> precisions;
  if (o.precision != "bf16") precisions.push_back(Precision::kFp32);
  if (o.precision != "fp32") precisions.push_back(Precision::kBf16);
  nanogpt::ThreadPool own(o.threads > 0 ? o.threads : 1);
  nanogpt::ThreadPool& pool = o.threads > 0 ? own : nanogpt::ThreadPool::global();
  nanogpt::ThreadPool::Use use(pool);
  if (o.packed_budget > 0) nanogpt::set_attention_packed_budget(o.packed_budget);
  if (o.stored_gradient_budget >= 0) {
    nanogpt::set_attention_stored_gradient_budget(o.stored_gradient_budget);
  }
  for (const Shape& s : shapes) {
    for (Precision precision : precisions) std::cout << run(s, precision, o).dump() << std::endl;
  }
  if (o.preset == "cached" || o.preset == "all") {
    for (const auto& [T, T_kv] : {std::pair<int64_t, int64_t>{1, 20}, {10, 20}, {20, 40}}) {
      for (Precision precision : precisions) {
        std::cout << run_cached(T, T_kv, precision, o).dump() << std::endl;
      }
    }
  }
  return 0;
}
