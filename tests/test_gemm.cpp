#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include "kernels/gemm.hpp"
#include "kernels/gemm/microkernel.hpp"
#include "runtime/thread_pool.hpp"

namespace nanogpt {
namespace {

std::vector<float> random_matrix(size_t n, std::mt19937& rng) {
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = u(rng);
  return v;
}

// fp32 accumulation over K terms of magnitude <= 1: relative (to the row norm) error bound
// ~ K·eps; we allow 4·sqrt(K)·eps·K-scale slack, far below any indexing bug's error.
void check_against_reference(const MicroKernel& kernel, Trans ta, Trans tb, int64_t M, int64_t N,
                             int64_t K, float alpha, float beta, uint32_t seed) {
  std::mt19937 rng(seed);
  int64_t lda = (ta == Trans::kNo ? K : M) + 3;  // padded leading dimensions
  int64_t ldb = (tb == Trans::kNo ? N : K) + 5;
  int64_t ldc = N + 2;
  auto A = random_matrix(static_cast<size_t>((ta == Trans::kNo ? M : K) * lda), rng);
  auto B = random_matrix(static_cast<size_t>((tb == Trans::kNo ? K : N) * ldb), rng);
  auto C0 = random_matrix(static_cast<size_t>(M * ldc), rng);
  auto got = C0, want = C0;
  if (beta == 0.0f) {
    // Outputs are poisoned: beta = 0 must overwrite, never read, even NaN.
    for (int64_t i = 0; i < M; ++i) {
      for (int64_t j = 0; j < N; ++j)
        got[static_cast<size_t>(i * ldc + j)] = std::numeric_limits<float>::quiet_NaN();
    }
  }
  gemm_with(kernel, ta, tb, M, N, K, alpha, A.data(), lda, B.data(), ldb, beta, got.data(), ldc);
  gemm_reference(ta, tb, M, N, K, alpha, A.data(), lda, B.data(), ldb, beta, want.data(), ldc);
  const double tol = 1e-6 * std::max<int64_t>(K, 1) + 1e-6;
  for (int64_t i = 0; i < M; ++i) {
    for (int64_t j = 0; j < ldc; ++j) {
      size_t idx = static_cast<size_t>(i * ldc + j);
      if (j >= N) {
        ASSERT_EQ(got[idx], C0[idx]) << "wrote outside C at " << i << "," << j;
        continue;
      }
      ASSERT_NEAR(got[idx], want[idx], tol * (1 + std::abs(want[idx])))
          << kernel.isa << " M=" << M << " N=" << N << " K=" << K << " at " << i << "," << j;
    }
  }
}

TEST(Gemm, EveryIsaMatchesReferenceOnAwkwardShapes) {
  uint32_t seed = 1;
  for (const MicroKernel& kernel : available_microkernels()) {
    for (Trans ta : {Trans::kNo, Trans::kYes}) {
      for (Trans tb : {Trans::kNo, Trans::kYes}) {
        for (int64_t M : {1, 7, 97, 130}) {
          for (int64_t N : {1, 17, 129}) {
            for (int64_t K : {1, 5, 300}) {
              check_against_reference(kernel, ta, tb, M, N, K, 1.0f, 0.0f, seed++);
            }
          }
        }
        check_against_reference(kernel, ta, tb, 200, 600, 513, 0.5f, 1.0f,
                                seed++);  // accumulate-into
        check_against_reference(kernel, ta, tb, 33, 44, 55, -2.0f, 0.25f, seed++);
      }
    }
  }
  EXPECT_GE(available_microkernels().size(), 1u);
}

TEST(Gemm, BitwiseIdenticalAcrossThreadCounts) {
  std::mt19937 rng(9);
  const int64_t M = 300, N = 700, K = 600;
  auto A = random_matrix(M * K, rng), B = random_matrix(N * K, rng);
  std::vector<float> c1(M * N), c2(M * N), c3(M * N);
  ThreadPool one(1), two(2), three(3);
  {
    ThreadPool::Use use(one);
    gemm(Trans::kNo, Trans::kYes, M, N, K, 1, A.data(), K, B.data(), K, 0, c1.data(), N);
  }
  {
    ThreadPool::Use use(two);
    gemm(Trans::kNo, Trans::kYes, M, N, K, 1, A.data(), K, B.data(), K, 0, c2.data(), N);
  }
  {
    ThreadPool::Use use(three);
    gemm(Trans::kNo, Trans::kYes, M, N, K, 1, A.data(), K, B.data(), K, 0, c3.data(), N);
  }
  EXPECT_EQ(0, std::memcmp(c1.data(), c2.data(), c1.size() * sizeof(float)));
  EXPECT_EQ(0, std::memcmp(c1.data(), c3.data(), c1.size() * sizeof(float)));
}

}  // namespace
}  // namespace nanogpt
