// Bitwise reproducibility: the same bits for 1, 2 and 3 threads and for every blocking the
// autotuner may choose, on every fp32 and bf16 kernel this CPU has, for all transposes.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "kernels/autotune.hpp"
#include "kernels/gemm.hpp"
#include "kernels/gemm/blocking.hpp"
#include "kernels/gemm/driver.hpp"
#include "kernels/gemm/microkernel.hpp"
#include "kernels/gemm_bf16.hpp"
#include "runtime/file_io.hpp"
#include "runtime/thread_pool.hpp"
#include "support/fixtures.hpp"
#include "support/kernels.hpp"

namespace nanogpt {
namespace {

struct Case {
  Trans ta, tb;
  int64_t M, N, K;
  float beta;
  std::vector<float> A, B, C0;
  Case(Trans ta_, Trans tb_, int64_t M_, int64_t N_, int64_t K_, float beta_, uint32_t seed)
      : ta(ta_), tb(tb_), M(M_), N(N_), K(K_), beta(beta_) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    A.resize(static_cast<size_t>(M * K));
    B.resize(static_cast<size_t>(K * N));
    C0.resize(static_cast<size_t>(M * N));
    for (auto* v : {&A, &B, &C0}) {
      for (auto& x : *v) x = u(rng);
    }
  }
  int64_t lda() const { return ta == Trans::kNo ? K : M; }
  int64_t ldb() const { return tb == Trans::kNo ? N : K; }

  std::vector<float> run(const MicroKernel& kernel, const GemmBlocking& blocking,
                         PackSource src) const {
    std::vector<float> c = C0;
    gemm_run(kernel, blocking, src, ta, tb, M, N, K, 0.75f, A.data(), lda(), B.data(), ldb(), beta,
             c.data(), N, nullptr);
    return c;
  }
};

TEST(GemmDeterminism, SameBitsForOneTwoAndThreeThreads) {
  ThreadPool one(1), two(2), three(3);
  uint32_t seed = 5;
  for (const auto& [kernel, source] : every_gemm_kernel()) {
    for (Trans ta : {Trans::kNo, Trans::kYes}) {
      for (Trans tb : {Trans::kNo, Trans::kYes}) {
        const Case c(ta, tb, 150, 333, 600, 1.0f, seed++);
        std::vector<float> r[3];
        ThreadPool* pools[3] = {&one, &two, &three};
        for (int t = 0; t < 3; ++t) {
          ThreadPool::Use use(*pools[t]);
          // Each pool's own default blocking: the task split differs with the thread count.
          r[t] = c.run(kernel, default_blocking(kernel, c.M, c.N, c.K, t + 1), source);
        }
        EXPECT_TRUE(same_bits(r[0], r[1])) << kernel.isa << " 1 vs 2 threads";
        EXPECT_TRUE(same_bits(r[0], r[2])) << kernel.isa << " 1 vs 3 threads";
      }
    }
  }
  // And through the public entry points (autotuned: in memory, no cache file).
  AutotuneCache cache("", CpuIdentity::current(), AutotuneMode::kOn);
  AutotuneCache::Use use_cache(cache);
  const Case c(Trans::kNo, Trans::kYes, 300, 700, 600, 0.0f, 99);
  std::vector<float> f[3], h[3];
  ThreadPool* pools[3] = {&one, &two, &three};
  for (int t = 0; t < 3; ++t) {
    ThreadPool::Use use(*pools[t]);
    f[t] = h[t] = c.C0;
    gemm(c.ta, c.tb, c.M, c.N, c.K, 1.0f, c.A.data(), c.lda(), c.B.data(), c.ldb(), 0.0f,
         f[t].data(), c.N);
    gemm_bf16(c.ta, c.tb, c.M, c.N, c.K, 1.0f, c.A.data(), c.lda(), c.B.data(), c.ldb(), 0.0f,
              h[t].data(), c.N);
  }
  EXPECT_TRUE(same_bits(f[0], f[1]) && same_bits(f[0], f[2]));
  EXPECT_TRUE(same_bits(h[0], h[1]) && same_bits(h[0], h[2]));
}

TEST(GemmDeterminism, EveryBlockingCandidateGivesTheSameBits) {
  ThreadPool two(2);
  ThreadPool::Use use(two);
  uint32_t seed = 50;
  for (const auto& [kernel, source] : every_gemm_kernel()) {
    for (Trans ta : {Trans::kNo, Trans::kYes}) {
      for (Trans tb : {Trans::kNo, Trans::kYes}) {
        const Case c(ta, tb, 97, 200, 1100, ta == Trans::kYes ? 1.0f : 0.0f, seed++);
        std::vector<GemmBlocking> all = blocking_candidates(kernel, c.M, c.N, c.K, 2);
        // The extremes too: one micro-tile per task, one k step per K block.
        all.push_back({kernel.mr, kernel.nr, kernel.k_step});
        all.push_back({1 << 20, 1 << 20, 0});
        ASSERT_GE(all.size(), 3u);
        const std::vector<float> first = c.run(kernel, all.front(), source);
        for (const GemmBlocking& b : all) {
          EXPECT_TRUE(same_bits(first, c.run(kernel, b, source)))
              << kernel.isa << " " << b.name() << " vs " << all.front().name();
        }
      }
    }
  }
}

// Where a task's packed panels over all of K would not stay in a core's L2 (the driver's
// kTaskPanelsBytes, 1 MiB: here mc + nc ≥ 480 rows of 2100 values), they are packed one K
// block at a time: the same bits as packing them whole first, which a task of one micro-tile
// does. With a K that leaves a ragged last block, and (the second shape: B's panels over all
// of K pass 4 MiB) with K taken in passes.
TEST(GemmDeterminism, PackingOneKBlockAtATimeGivesTheSameBits) {
  ThreadPool two(2);
  ThreadPool::Use use(two);
  uint32_t seed = 70;
  struct Shape {
    int64_t M, N, K;
  };
  for (const Shape& s : {Shape{200, 256, 2100}, Shape{64, 1100, 2100}}) {
    for (const auto& [kernel, source] : every_gemm_kernel()) {
      for (Trans ta : {Trans::kNo, Trans::kYes}) {
        for (Trans tb : {Trans::kNo, Trans::kYes}) {
          const Case c(ta, tb, s.M, s.N, s.K, ta == Trans::kYes ? 1.0f : 0.0f, seed++);
          const std::vector<float> whole = c.run(kernel, {kernel.mr, kernel.nr, 64}, source);
          EXPECT_TRUE(same_bits(whole, c.run(kernel, {1 << 20, 1 << 20, 64}, source)))
              << kernel.isa << " " << s.M << "x" << s.N << "x" << s.K << " per K block";
          EXPECT_TRUE(same_bits(whole, c.run(kernel, {1 << 20, 1 << 20, 0}, source)))
              << kernel.isa << " " << s.M << "x" << s.N << "x" << s.K << " one K block";
        }
      }
    }
  }
}

// A large, aligned, write-only C is stored non-temporally: the same bits as the usual path
// (which a C one float off alignment takes).
TEST(GemmDeterminism, StreamingStoresGiveTheSameBits) {
  const int64_t M = 1024, N = 2048, K = 40;  // C is 8 MiB
  const Case c(Trans::kNo, Trans::kYes, M, N, K, 0.0f, 21);
  std::vector<float> storage(static_cast<size_t>(M * N + 32));
  float* aligned = storage.data();
  while (reinterpret_cast<uintptr_t>(aligned) % 64 != 0) ++aligned;
  auto run = [&](const MicroKernel& kernel, PackSource source, float* out) {
    std::fill(storage.begin(), storage.end(), -1.0f);
    gemm_run(kernel, default_blocking(kernel, M, N, K, 1), source, c.ta, c.tb, M, N, K, 0.75f,
             c.A.data(), c.lda(), c.B.data(), c.ldb(), 0.0f, out, N, nullptr);
    return std::vector<float>(out, out + M * N);
  };
  for (const auto& [kernel, source] : every_gemm_kernel()) {
    EXPECT_TRUE(same_bits(run(kernel, source, aligned), run(kernel, source, aligned + 1)))
        << kernel.isa;
  }
}

// Autotuning times candidates into scratch: the caller's C (read with beta = 1) must come out
// as one call with any blocking would leave it.
TEST(GemmDeterminism, AutotuningLeavesResultsAsTheDefaultBlockingDoes) {
  AutotuneCache cache("", CpuIdentity::current(), AutotuneMode::kOn);
  AutotuneCache::Use use_cache(cache);
  for (bool bf16 : {false, true}) {
    const Case c(Trans::kYes, Trans::kNo, 256, 320, 512, 1.0f, bf16 ? 11 : 12);
    const MicroKernel& kernel = bf16 ? active_bf16_microkernel() : active_microkernel();
    const PackSource source = bf16 ? PackSource::kF32ToBf16 : PackSource::kF32;
    std::vector<float> got = c.C0;
    if (bf16) {
      gemm_bf16(c.ta, c.tb, c.M, c.N, c.K, 0.75f, c.A.data(), c.lda(), c.B.data(), c.ldb(), 1.0f,
                got.data(), c.N);
    } else {
      gemm(c.ta, c.tb, c.M, c.N, c.K, 0.75f, c.A.data(), c.lda(), c.B.data(), c.ldb(), 1.0f,
           got.data(), c.N);
    }
    const GemmBlocking d = default_blocking(kernel, c.M, c.N, c.K, ThreadPool::current().size());
    EXPECT_TRUE(same_bits(got, c.run(kernel, d, source))) << kernel.isa;
  }
}

// The autotuner keys a product by the power of two at or above its height: heights 300 and 400
// (both tuned: over 2^24 multiply-adds) share one entry, M=512, timed once; 600 gets its own.
TEST(GemmDeterminism, TunedHeightsShareAPowerOfTwoKey) {
  TempDir dir;
  AutotuneCache cache(dir.path(), CpuIdentity::current(), AutotuneMode::kOn);
  AutotuneCache::Use use_cache(cache);
  ThreadPool two(2);
  ThreadPool::Use use(two);
  for (int64_t M : {300, 400, 600}) {
    const Case c(Trans::kNo, Trans::kYes, M, 256, 256, 0.0f, 7);
    std::vector<float> out = c.C0;
    gemm(c.ta, c.tb, M, c.N, c.K, 1.0f, c.A.data(), c.lda(), c.B.data(), c.ldb(), 0.0f, out.data(),
         c.N);
  }
  const nlohmann::json j = nlohmann::json::parse(read_file(cache.file_path()));
  std::vector<std::string> gemm_keys;
  for (const auto& [key, entry] : j["entries"].items()) {
    if (key.rfind("op=gemm_nt", 0) == 0) gemm_keys.push_back(key);
  }
  ASSERT_EQ(gemm_keys.size(), 2u) << j.dump();
  int with_512 = 0, with_1024 = 0;
  for (const std::string& key : gemm_keys) {
    with_512 += key.find(" M=512 ") != std::string::npos ? 1 : 0;
    with_1024 += key.find(" M=1024 ") != std::string::npos ? 1 : 0;
  }
  EXPECT_EQ(with_512, 1) << j.dump();
  EXPECT_EQ(with_1024, 1) << j.dump();
}

}  // namespace
}  // namespace nanogpt
