// Grouped GEMM for a mixture of experts against the two ways it is done without one, on the
// c_fc products of a small MoE MLP (d = 256, T = 4096 tokens, top-2): forward X_g·W_gᵀ, input
// gradient dH_g·W_g and weight gradient dW_g += dH_gᵀ·X_g, for every expert g.
//   grouped   one grouped_gemm_rows / grouped_gemm_reduce call (kernels/grouped_gemm.hpp)
//   loop      one gemm_with() call per expert (each its own parallel loop and barrier)
//   padded    every expert padded to the largest group, one grouped call on equal groups
//             (a batched GEMM), its zero rows computed too
// All three use the active kernel with its default blocking (no autotuning, so no method gets
// a blocking the others do not). GFLOP/s count the useful products only, 2·rows·N·K, so
// padding's wasted work shows as a lower figure. Routing is uniform or Zipf-skewed (expert e
// chosen with probability ∝ 1/(e+1)^s), E = 8 and 64 with the hidden width scaled so the
// experts hold the same parameters: hidden = 32·d/(E·k), 512 for E = 8, 64 for E = 64.
// One JSON line per (E, routing, dtype, op), with the three figures and the ratios.
//
//   grouped_gemm_bench [--threads N] [--dtype fp32|bf16|both] [--experts 8|64|both]
//                      [--tokens T] [--zipf S] [--min-seconds S]
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "kernels/gemm.hpp"
#include "kernels/gemm/microkernel.hpp"
#include "kernels/gemm_bf16.hpp"
#include "kernels/grouped_gemm.hpp"
#include "kernels/moe_routing.hpp"
#include "runtime/cpu_info.hpp"
#include "runtime/thread_pool.hpp"

namespace {

using nanogpt::MicroKernel;
using nanogpt::PackSource;
using nanogpt::Trans;

[[noreturn]] void usage(const std::string& problem) {
  std::fprintf(stderr,
               "grouped_gemm_bench: %s\nusage: grouped_gemm_bench [--threads N] "
               "[--dtype fp32|bf16|both] [--experts 8|64|both] [--tokens T] [--zipf S] "
               "[--min-seconds S]\n",
               problem.c_str());
  std::exit(2);
}

// Best seconds of runs after one warm-up, until min_seconds have passed (at least 3 runs).
double best_seconds(const std::function<void()>& fn, double min_seconds) {
  using clock = std::chrono::steady_clock;
  fn();
  double best = 1e30;
  const auto start = clock::now();
  for (int runs = 0;
       runs < 3 || std::chrono::duration<double>(clock::now() - start).count() < min_seconds;
       ++runs) {
    const auto t0 = clock::now();
    fn();
    best = std::min(best, std::chrono::duration<double>(clock::now() - t0).count());
    if (runs >= 200) break;
  }
  return best;
}

// k distinct experts per token: uniform (zipf = 0) or with probability ∝ 1/(e+1)^zipf.
std::vector<int32_t> route(int64_t tokens, int64_t experts, int64_t k, double zipf,
                           std::mt19937& rng) {
  std::vector<double> p(static_cast<size_t>(experts));
  for (int64_t e = 0; e < experts; ++e) p[e] = 1.0 / std::pow(static_cast<double>(e + 1), zipf);
  std::discrete_distribution<int32_t> pick(p.begin(), p.end());
  std::vector<int32_t> ids;
  for (int64_t t = 0; t < tokens; ++t) {
    std::vector<int32_t> chosen;
    while (static_cast<int64_t>(chosen.size()) < k) {
      const int32_t e = pick(rng);
      if (std::find(chosen.begin(), chosen.end(), e) == chosen.end()) chosen.push_back(e);
    }
    ids.insert(ids.end(), chosen.begin(), chosen.end());
  }
  return ids;
}

std::vector<float> random_values(size_t n, std::mt19937& rng) {
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = u(rng);
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  int threads = nanogpt::ThreadPool::default_threads();
  std::string dtype = "both", experts_arg = "both";
  int64_t tokens = 4096;
  double zipf_s = 1.2, min_seconds = 0.3;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) usage(arg + " needs a value");
      return argv[++i];
    };
    if (arg == "--threads") {
      threads = std::atoi(value().c_str());
    } else if (arg == "--dtype") {
      dtype = value();
    } else if (arg == "--experts") {
      experts_arg = value();
    } else if (arg == "--tokens") {
      tokens = std::atoll(value().c_str());
    } else if (arg == "--zipf") {
      zipf_s = std::atof(value().c_str());
    } else if (arg == "--min-seconds") {
      min_seconds = std::atof(value().c_str());
    } else {
      usage("unknown argument " + arg);
    }
  }
  if (dtype != "fp32" && dtype != "bf16" && dtype != "both") usage("bad --dtype " + dtype);
  if (experts_arg != "8" && experts_arg != "64" && experts_arg != "both") {
    usage("bad --experts " + experts_arg);
  }
  if (threads < 1) usage("bad --threads");
  if (tokens < 1) usage("bad --tokens");

  nanogpt::ThreadPool pool(threads);
  nanogpt::ThreadPool::Use use(pool);
  std::printf("%s\n", nlohmann::json{{"bench", "grouped_gemm"},
                                     {"cpu", nanogpt::cpu_info().model_name},
                                     {"threads", threads},
                                     {"load_avg_1m", nanogpt::load_average()}}
                          .dump()
                          .c_str());

  const int64_t d = 256, k = 2;
  std::vector<int64_t> expert_counts;
  if (experts_arg != "64") expert_counts.push_back(8);
  if (experts_arg != "8") expert_counts.push_back(64);
  std::mt19937 rng(1);
  for (int64_t E : expert_counts) {
    const int64_t hidden = 32 * d / (E * k);
    const std::vector<float> W = random_values(static_cast<size_t>(E * hidden * d), rng);
    for (double zipf : {0.0, zipf_s}) {
      const std::vector<int32_t> ids = route(tokens, E, k, zipf, rng);
      const nanogpt::MoePlan plan = nanogpt::plan_moe_routing(tokens, E, k, ids.data());
      const int64_t rows = plan.rows();
      int64_t largest = 0;
      for (int64_t e = 0; e < E; ++e) {
        largest = std::max(largest, plan.offsets[e + 1] - plan.offsets[e]);
      }
      // Padded: every expert gets `largest` rows, its real rows first, zeros after.
      std::vector<int64_t> padded_offsets(static_cast<size_t>(E + 1));
      for (int64_t e = 0; e <= E; ++e) padded_offsets[e] = e * largest;
      const int64_t padded_rows = E * largest;
      const std::vector<float> X = random_values(static_cast<size_t>(rows * d), rng);
      const std::vector<float> dH = random_values(static_cast<size_t>(rows * hidden), rng);
      std::vector<float> Xp(static_cast<size_t>(padded_rows * d), 0.0f);
      std::vector<float> dHp(static_cast<size_t>(padded_rows * hidden), 0.0f);
      for (int64_t e = 0; e < E; ++e) {
        const int64_t first = plan.offsets[e], n = plan.offsets[e + 1] - first;
        std::copy(X.begin() + first * d, X.begin() + (first + n) * d, Xp.begin() + e * largest * d);
        std::copy(dH.begin() + first * hidden, dH.begin() + (first + n) * hidden,
                  dHp.begin() + e * largest * hidden);
      }
      std::vector<float> H(static_cast<size_t>(padded_rows * hidden));
      std::vector<float> dX(static_cast<size_t>(padded_rows * d));
      std::vector<float> dW(W.size(), 0.0f);

      for (const char* dt : {"fp32", "bf16"}) {
        if (dtype != "both" && dtype != dt) continue;
        const bool bf16 = std::string(dt) == "bf16";
        const MicroKernel& kernel =
            bf16 ? nanogpt::active_bf16_microkernel() : nanogpt::active_microkernel();
        const PackSource source = bf16 ? PackSource::kF32ToBf16 : PackSource::kF32;
        auto gemm_one = [&](Trans ta, Trans tb, int64_t M, int64_t N, int64_t K, const float* A,
                            int64_t lda, const float* B, int64_t ldb, float beta, float* C,
                            int64_t ldc) {
          if (bf16) {
            nanogpt::gemm_bf16_with(kernel, ta, tb, M, N, K, 1.0f, A, lda, B, ldb, beta, C, ldc);
          } else {
            nanogpt::gemm_with(kernel, ta, tb, M, N, K, 1.0f, A, lda, B, ldb, beta, C, ldc);
          }
        };
        struct Op {
          const char* name;
          std::function<void(const std::vector<int64_t>&, const float*, const float*)> grouped;
          std::function<void(int64_t e, int64_t first, int64_t n)> one_expert;
        };
        const std::vector<Op> ops = {
            {"fc_fwd",
             [&](const std::vector<int64_t>& offs, const float* x, const float*) {
               nanogpt::grouped_gemm_rows_with(kernel, source, offs, Trans::kYes, hidden, d, 1.0f,
                                               x, d, W.data(), d, hidden * d, 0.0f, H.data(),
                                               hidden);
             },
             [&](int64_t e, int64_t first, int64_t n) {
               gemm_one(Trans::kNo, Trans::kYes, n, hidden, d, X.data() + first * d, d,
                        W.data() + e * hidden * d, d, 0.0f, H.data() + first * hidden, hidden);
             }},
            {"fc_dgrad",
             [&](const std::vector<int64_t>& offs, const float*, const float* dh) {
               nanogpt::grouped_gemm_rows_with(kernel, source, offs, Trans::kNo, d, hidden, 1.0f,
                                               dh, hidden, W.data(), d, hidden * d, 0.0f, dX.data(),
                                               d);
             },
             [&](int64_t e, int64_t first, int64_t n) {
               gemm_one(Trans::kNo, Trans::kNo, n, d, hidden, dH.data() + first * hidden, hidden,
                        W.data() + e * hidden * d, d, 0.0f, dX.data() + first * d, d);
             }},
            {"fc_wgrad",
             [&](const std::vector<int64_t>& offs, const float* x, const float* dh) {
               nanogpt::grouped_gemm_reduce_with(kernel, source, offs, hidden, d, 1.0f, dh, hidden,
                                                 x, d, 1.0f, dW.data(), d, hidden * d);
             },
             [&](int64_t e, int64_t first, int64_t n) {
               gemm_one(Trans::kYes, Trans::kNo, hidden, d, n, dH.data() + first * hidden, hidden,
                        X.data() + first * d, d, 1.0f, dW.data() + e * hidden * d, d);
             }},
        };
        const double flops = 2.0 * static_cast<double>(rows) * hidden * d;
        for (const Op& op : ops) {
          const double grouped =
              best_seconds([&] { op.grouped(plan.offsets, X.data(), dH.data()); }, min_seconds);
          const double loop = best_seconds(
              [&] {
                for (int64_t e = 0; e < E; ++e) {
                  op.one_expert(e, plan.offsets[e], plan.offsets[e + 1] - plan.offsets[e]);
                }
              },
              min_seconds);
          const double padded =
              best_seconds([&] { op.grouped(padded_offsets, Xp.data(), dHp.data()); }, min_seconds);
          const nlohmann::json line = {
              {"bench", "grouped_gemm"},
              {"op", op.name},
              {"experts", E},
              {"top_k", k},
              {"tokens", tokens},
              {"d", d},
              {"hidden", hidden},
              {"routing", zipf == 0.0 ? "uniform" : "zipf" + std::to_string(zipf).substr(0, 4)},
              {"largest_group", largest},
              {"mean_group", static_cast<double>(rows) / static_cast<double>(E)},
              {"dtype", dt},
              {"kernel", kernel.isa},
              {"threads", threads},
              {"gflops_grouped", flops / grouped * 1e-9},
              {"gflops_loop", flops / loop * 1e-9},
              {"gflops_padded", flops / padded * 1e-9},
              {"grouped_over_loop", loop / grouped},
              {"grouped_over_padded", padded / grouped},
              {"load_avg_1m", nanogpt::load_average()},
          };
          std::printf("%s\n", line.dump().c_str());
          std::fflush(stdout);
        }
      }
    }
  }
  return 0;
}
