// Products with op(B) packed once (kernels/gemm/packed_b.hpp): the same bits as the product
// packing B itself, on every fp32 and bf16 kernel this CPU has (and AMX on its software model),
// for every transpose, ragged shapes, B wider than one superblock, K = 0, the epilogue and
// any thread count; the packed bytes do not depend on the thread count; a B packed for one
// kernel is refused by another.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <random>
#include <stdexcept>
#include <vector>

#include "kernels/gemm/blocking.hpp"
#include "kernels/gemm/driver.hpp"
#include "kernels/gemm/microkernel.hpp"
#include "kernels/gemm/packed_b.hpp"
#include "kernels/matmul.hpp"
#include "runtime/error.hpp"
#include "runtime/thread_pool.hpp"
#include "support/kernels.hpp"

namespace nanogpt {
namespace {

struct Shape {
  int64_t M, N, K;
};

TEST(GemmPackedB, SameBitsAsPackingBInTheProduct) {
  ThreadPool two(2);
  ThreadPool::Use use(two);
  // Ragged everywhere; one 1-row A (decoding); K = 0 (C = beta·C); and a B whose packed panels
  // outgrow the driver's superblock (4 MiB: 2,100 columns of K = 600 in fp32), which both take
  // a superblock at a time, the packed one reading its panels from column s0 of the whole.
  const Shape shapes[] = {{37, 91, 53}, {1, 300, 256}, {64, 70, 0}, {45, 2100, 600}};
  uint32_t seed = 11;
  for (const auto& [kernel, source] : every_gemm_kernel()) {
    for (const Shape& s : shapes) {
      if (s.N * s.K > 1'000'000 && kernel.level == IsaLevel::kScalar) continue;  // too slow
      for (Trans ta : {Trans::kNo, Trans::kYes}) {
        for (Trans tb : {Trans::kNo, Trans::kYes}) {
          const std::vector<float> A = random_values(static_cast<size_t>(s.M * s.K), seed++);
          const std::vector<float> B = random_values(static_cast<size_t>(s.K * s.N), seed++);
          const std::vector<float> C0 = random_values(static_cast<size_t>(s.M * s.N), seed++);
          const int64_t lda = ta == Trans::kNo ? s.K : s.M;
          const int64_t ldb = tb == Trans::kNo ? s.N : s.K;
          PackedB packed;
          pack_b_operand(kernel, source, tb, s.K, s.N, B.data(), ldb, packed);
          // The default blocking, and small blocks: several row and column blocks, whose tasks
          // the driver numbers along the rows when B comes packed (small) and A is packed, and
          // down the columns when it packs B itself.
          for (const GemmBlocking& blocking :
               {default_blocking(kernel, s.M, s.N, s.K, 2),
                GemmBlocking{2 * kernel.mr, 2 * kernel.nr, 2 * kernel.k_step}}) {
            std::vector<float> expected = C0, got = C0;
            gemm_run(kernel, blocking, source, ta, tb, s.M, s.N, s.K, 0.75f, A.data(), lda,
                     B.data(), ldb, 0.5f, expected.data(), s.N, nullptr);
            gemm_run_packed_b(kernel, blocking, source, ta, s.M, s.N, 0.75f, A.data(), lda, packed,
                              0.5f, got.data(), s.N, nullptr);
            EXPECT_TRUE(same_bits(expected, got))
                << kernel.isa << " M=" << s.M << " N=" << s.N << " K=" << s.K
                << " ta=" << (ta == Trans::kYes) << " tb=" << (tb == Trans::kYes) << " "
                << blocking.name();
          }
        }
      }
    }
  }
}

TEST(GemmPackedB, EpilogueAndEveryBlockingGiveTheSameBits) {
  ThreadPool two(2);
  ThreadPool::Use use(two);
  const int64_t M = 97, N = 200, K = 300;
  const std::vector<float> A = random_values(M * K, 1), B = random_values(K * N, 2);
  const std::vector<float> addend = random_values(M * N, 3);
  GemmEpilogue ep;
  ep.relu_squared = true;
  ep.addend = addend.data();
  ep.ld_addend = N;
  ep.addend_scale = -0.25f;
  for (const auto& [kernel, source] : every_gemm_kernel()) {
    PackedB packed;
    pack_b_operand(kernel, source, Trans::kYes, K, N, B.data(), K, packed);
    std::vector<GemmBlocking> all = blocking_candidates(kernel, M, N, K, 2);
    all.push_back({kernel.mr, kernel.nr, kernel.k_step});
    for (const GemmBlocking& b : all) {
      std::vector<float> expected(M * N, 0.0f), got(M * N, 0.0f);
      gemm_run(kernel, b, source, Trans::kNo, Trans::kYes, M, N, K, 1.0f, A.data(), K, B.data(), K,
               0.0f, expected.data(), N, &ep);
      gemm_run_packed_b(kernel, b, source, Trans::kNo, M, N, 1.0f, A.data(), K, packed, 0.0f,
                        got.data(), N, &ep);
      EXPECT_TRUE(same_bits(expected, got)) << kernel.isa << " " << b.name();
    }
  }
}

// A product on the first n columns of a packed B gives the bits of the product on those columns
// of the unpacked B, for every n: whole panels, a ragged last panel (whose packed columns past n
// hold B's values, not zeros), one column, none, and all of them.
TEST(GemmPackedB, FirstColumnsGiveTheBitsOfTheProductOnThoseColumns) {
  ThreadPool two(2);
  ThreadPool::Use use(two);
  const int64_t M = 70, N = 230, K = 150;
  const std::vector<float> A = random_values(M * K, 21), B = random_values(K * N, 22);
  const std::vector<float> addend = random_values(M * N, 23);
  for (const auto& [kernel, source] : every_gemm_kernel()) {
    for (Trans tb : {Trans::kNo, Trans::kYes}) {
      const int64_t ldb = tb == Trans::kNo ? N : K;
      PackedB packed;
      pack_b_operand(kernel, source, tb, K, N, B.data(), ldb, packed);
      for (int64_t n : {int64_t{0}, int64_t{1}, kernel.nr, 2 * kernel.nr + 5, N - 1, N}) {
        GemmEpilogue ep;  // an addend read in the first n columns only
        ep.addend = addend.data();
        ep.ld_addend = N;
        ep.addend_scale = 0.5f;
        const GemmBlocking blocking = default_blocking(kernel, M, std::max<int64_t>(n, 1), K, 2);
        // C is M × n with ldc = N; the columns past n must stay untouched.
        std::vector<float> expected = random_values(M * N, 24), got = expected;
        gemm_run(kernel, blocking, source, Trans::kNo, tb, M, n, K, 0.75f, A.data(), K, B.data(),
                 ldb, 0.0f, expected.data(), N, &ep);
        gemm_run_packed_b(kernel, blocking, source, Trans::kNo, M, n, 0.75f, A.data(), K, packed,
                          0.0f, got.data(), N, &ep);
        EXPECT_TRUE(same_bits(expected, got))
            << kernel.isa << " n=" << n << " tb=" << (tb == Trans::kYes);
      }
    }
  }
}

TEST(GemmPackedB, PackedBytesDoNotDependOnTheThreadCountOrTheBufferReused) {
  ThreadPool one(1), three(3);
  const int64_t K = 260, N = 1000;
  const std::vector<float> B = random_values(K * N, 7);
  const std::vector<float> big = random_values(600 * 1500, 8);
  for (const auto& [kernel, source] : every_gemm_kernel()) {
    for (Trans tb : {Trans::kNo, Trans::kYes}) {
      const int64_t ldb = tb == Trans::kNo ? N : K;
      PackedB a, b;
      {
        ThreadPool::Use use(one);
        pack_b_operand(kernel, source, tb, K, N, B.data(), ldb, a);
      }
      {
        ThreadPool::Use use(three);
        // Reused after a larger packing: the stale bytes past the new panels must not matter,
        // and those of the new panels are all rewritten.
        pack_b_operand(kernel, source, Trans::kNo, 600, 1500, big.data(), 1500, b);
        pack_b_operand(kernel, source, tb, K, N, B.data(), ldb, b);
      }
      ASSERT_EQ(a.data.size(), b.data.size()) << kernel.isa;
      EXPECT_EQ(0, std::memcmp(a.data.data(), b.data.data(), a.data.size())) << kernel.isa;
      EXPECT_GE(a.bytes(), static_cast<size_t>(a.kp * N * kernel.packed_bytes));
      EXPECT_EQ(a.K, K);
      EXPECT_EQ(a.N, N);
    }
  }
}

TEST(GemmPackedB, ThePublicEntryPointsMatchTheUnpackedProducts) {
  const int64_t M = 150, N = 333, K = 256;
  const std::vector<float> A = random_values(M * K, 21), B = random_values(N * K, 22);
  for (Precision p : {Precision::kFp32, Precision::kBf16}) {
    PackedB packed;
    pack_matmul_b(p, Trans::kYes, K, N, B.data(), K, packed);
    std::vector<float> expected(M * N), got(M * N);
    matmul(p, Trans::kNo, Trans::kYes, M, N, K, 1.0f, A.data(), K, B.data(), K, 0.0f,
           expected.data(), N);
    matmul(Trans::kNo, M, 1.0f, A.data(), K, packed, 0.0f, got.data(), N);
    EXPECT_TRUE(same_bits(expected, got)) << (p == Precision::kBf16 ? "bf16" : "fp32");
  }
  // A stored as bf16 against B packed from fp32 (the fused loss's gradient times W).
  PackedB packed;
  pack_matmul_b(Precision::kBf16, Trans::kNo, N, K, B.data(), K, packed);
  std::vector<float> expected(M * K), got(M * K);
  const std::vector<float> G = random_values(M * N, 23);
  std::vector<bf16> G16(G.size());
  for (size_t i = 0; i < G.size(); ++i) G16[i] = to_bf16(G[i]);
  gemm_bf16(Trans::kNo, Trans::kNo, M, K, N, 1.0f, G16.data(), N, B.data(), K, 0.0f,
            expected.data(), K);
  matmul(Trans::kNo, M, 1.0f, G16.data(), N, packed, 0.0f, got.data(), K);
  EXPECT_TRUE(same_bits(expected, got));
}

TEST(GemmPackedB, RefusesABPackedForAnotherKernelAndBadShapes) {
  const std::vector<float> B = random_values(64 * 64, 31), A = B;
  std::vector<float> C(64 * 64);
  const std::vector<MicroKernel> fp32 = available_microkernels();
  const MicroKernel scalar = microkernel_scalar();
  const MicroKernel& other = fp32.back();
  PackedB packed;
  pack_b_operand(scalar, PackSource::kF32, Trans::kNo, 64, 64, B.data(), 64, packed);
  if (other.fn != scalar.fn) {
    EXPECT_THROW(gemm_run_packed_b(other, default_blocking(other, 64, 64, 64, 1), PackSource::kF32,
                                   Trans::kNo, 64, 64, 1.0f, A.data(), 64, packed, 0.0f, C.data(),
                                   64, nullptr),
                 std::invalid_argument);
  }
  // More columns than were packed, or a negative count.
  EXPECT_THROW(gemm_run_packed_b(scalar, default_blocking(scalar, 64, 64, 64, 1), PackSource::kF32,
                                 Trans::kNo, 64, 65, 1.0f, A.data(), 64, packed, 0.0f, C.data(), 65,
                                 nullptr),
               std::invalid_argument);
  EXPECT_THROW(
      matmul_first_columns(Trans::kNo, 64, -1, 1.0f, A.data(), 64, packed, 0.0f, C.data(), 64),
      std::invalid_argument);
  PackedB empty;
  EXPECT_THROW(matmul(Trans::kNo, 64, 1.0f, A.data(), 64, empty, 0.0f, C.data(), 64),
               std::invalid_argument);
  EXPECT_THROW(pack_b_operand(scalar, PackSource::kF32, Trans::kNo, -1, 64, B.data(), 64, packed),
               InputError);
  EXPECT_THROW(matmul(Trans::kNo, -3, 1.0f, A.data(), 64, packed, 0.0f, C.data(), 64), InputError);
}

}  // namespace
}  // namespace nanogpt
