// Workspace: buffers per slot and thread, reused without growth, counted, released; the GEMM
// driver keeps its scratch in the workspace in scope and gives the same bits from any one.
#include "runtime/workspace.hpp"
#include "support/kernels.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <set>
#include <thread>
#include <vector>

#include "kernels/gemm.hpp"
#include "kernels/gemm_bf16.hpp"
#include "runtime/thread_pool.hpp"

namespace nanogpt {
namespace {

bool cache_aligned(const void* p) {
  return reinterpret_cast<uintptr_t>(p) % 64 == 0;
}

TEST(Workspace, ReusesABufferAskedForAgainAndCountsIt) {
  Workspace ws("test");
  EXPECT_EQ(ws.name(), "test");
  EXPECT_EQ(ws.bytes_held(), 0u);
  std::byte* a = ws.get("a", 1000);
  ASSERT_NE(a, nullptr);
  EXPECT_TRUE(cache_aligned(a));
  EXPECT_EQ(ws.bytes_held(), 1000u);
  std::memset(a, 0x5a, 1000);
  // The same size or less: the same memory, contents kept, nothing more held.
  EXPECT_EQ(ws.get("a", 1000), a);
  EXPECT_EQ(ws.get("a", 10), a);
  EXPECT_EQ(a[999], std::byte{0x5a});
  EXPECT_EQ(ws.bytes_held(), 1000u);
  EXPECT_EQ(ws.peak_bytes(), 1000u);
  // Another slot is another buffer.
  float* b = ws.get<float>("b", 100);
  EXPECT_NE(reinterpret_cast<std::byte*>(b), a);
  EXPECT_TRUE(cache_aligned(b));
  EXPECT_EQ(ws.bytes_held(), 1400u);
  EXPECT_EQ(ws.peak_bytes(), 1400u);
}

TEST(Workspace, GrowingReplacesTheBufferAndPeakRemembersTheMost) {
  Workspace ws("test");
  ws.get("a", 4096);
  ws.get("b", 100);
  ws.get("a", 8192);  // the 4096 bytes are freed before the 8192 are taken
  EXPECT_EQ(ws.bytes_held(), 8292u);
  EXPECT_EQ(ws.peak_bytes(), 8292u);
  ws.release();
  EXPECT_EQ(ws.bytes_held(), 0u);
  EXPECT_EQ(ws.peak_bytes(), 8292u);
  ws.reset_peak();
  EXPECT_EQ(ws.peak_bytes(), 0u);
  ws.get("a", 64);
  EXPECT_EQ(ws.bytes_held(), 64u);
  EXPECT_EQ(ws.peak_bytes(), 64u);
}

TEST(Workspace, ZeroNewZeroesOnlyWhatGrows) {
  Workspace ws("test");
  std::byte* a = ws.get("a", 256, /*zero_new=*/true);
  for (int i = 0; i < 256; ++i) ASSERT_EQ(a[i], std::byte{0}) << i;
  std::memset(a, 7, 256);
  EXPECT_EQ(ws.get("a", 256, true)[100], std::byte{7});  // not grown: kept
  std::byte* c = ws.get("a", 512, true);
  for (int i = 0; i < 512; ++i) ASSERT_EQ(c[i], std::byte{0}) << i;
}

TEST(Workspace, LanesAreDistinctBuffersAndLaneZeroIsTheSlotsBuffer) {
  Workspace ws("test");
  const std::span<std::byte* const> lanes = ws.lanes("tile", 4, 1024);
  ASSERT_EQ(lanes.size(), 4u);
  std::set<std::byte*> distinct(lanes.begin(), lanes.end());
  EXPECT_EQ(distinct.size(), 4u);
  for (std::byte* p : lanes) EXPECT_TRUE(cache_aligned(p));
  EXPECT_EQ(ws.bytes_held(), 4096u);
  std::byte* lane0 = lanes[0];
  EXPECT_EQ(ws.get("tile", 1024), lane0);
  // Fewer lanes reuse the first ones; asking again holds nothing more.
  const std::span<std::byte* const> two = ws.lanes("tile", 2, 1024);
  EXPECT_EQ(two[0], lane0);
  EXPECT_EQ(ws.bytes_held(), 4096u);
  // Each lane grows on its own.
  ws.lanes("tile", 4, 2048);
  EXPECT_EQ(ws.bytes_held(), 8192u);
}

TEST(Workspace, ThreadsSharingAWorkspaceGetBuffersOfTheirOwn) {
  Workspace ws("test");
  std::byte* mine = ws.get("a", 128);
  std::byte* theirs = nullptr;
  std::thread t([&] { theirs = ws.get("a", 128); });
  t.join();
  EXPECT_NE(mine, theirs);
  EXPECT_EQ(ws.bytes_held(), 256u);
  EXPECT_EQ(ws.get("a", 128), mine);
}

TEST(Workspace, UseScopesNestAndRestore) {
  Workspace outer("outer"), inner("inner");
  EXPECT_EQ(&Workspace::current(), &Workspace::process_default());
  {
    Workspace::Use use_outer(outer);
    EXPECT_EQ(&Workspace::current(), &outer);
    {
      Workspace::Use use_inner(inner);
      EXPECT_EQ(&Workspace::current(), &inner);
      // Another thread does not see this thread's scope.
      Workspace* seen = nullptr;
      std::thread t([&] { seen = &Workspace::current(); });
      t.join();
      EXPECT_EQ(seen, &Workspace::process_default());
    }
    EXPECT_EQ(&Workspace::current(), &outer);
  }
  EXPECT_EQ(&Workspace::current(), &Workspace::process_default());
}

// A product of several tasks and, with K = 600, several K blocks (the per-task accumulator
// blocks), run on three threads; under the autotuner's threshold, so no timing runs.
struct Product {
  int64_t M = 120, N = 150, K = 600;
  std::vector<float> A = random_values(static_cast<size_t>(M * K), 1);
  std::vector<float> B = random_values(static_cast<size_t>(N * K), 2);

  std::vector<float> run(bool bf16) const {
    std::vector<float> C(static_cast<size_t>(M * N), -1.0f);
    if (bf16) {
      gemm_bf16(Trans::kNo, Trans::kYes, M, N, K, 1.0f, A.data(), K, B.data(), K, 0.0f, C.data(),
                N);
    } else {
      gemm(Trans::kNo, Trans::kYes, M, N, K, 1.0f, A.data(), K, B.data(), K, 0.0f, C.data(), N);
    }
    return C;
  }
};

TEST(Workspace, GemmKeepsItsScratchInTheWorkspaceInScope) {
  const Product product;
  ThreadPool three(3);
  ThreadPool::Use use_pool(three);
  for (bool bf16 : {false, true}) {
    SCOPED_TRACE(bf16 ? "bf16" : "fp32");
    const std::vector<float> in_default = product.run(bf16);
    Workspace ws("gemm test");
    const size_t default_bytes = Workspace::process_default().bytes_held();
    std::vector<float> first, again, after_release;
    {
      Workspace::Use use(ws);
      first = product.run(bf16);
      const size_t held = ws.bytes_held();
      // At least the packed A (M·K values of 2 or 4 bytes) and packed B.
      EXPECT_GE(held, static_cast<size_t>((product.M + product.N) * product.K * 2));
      // The same product again: the same buffers, nothing more held.
      again = product.run(bf16);
      EXPECT_EQ(ws.bytes_held(), held);
      EXPECT_EQ(ws.peak_bytes(), held);
      ws.release();
      EXPECT_EQ(ws.bytes_held(), 0u);
      after_release = product.run(bf16);
      EXPECT_EQ(ws.bytes_held(), held);
    }
    // The scoped calls took nothing from the process default.
    EXPECT_EQ(Workspace::process_default().bytes_held(), default_bytes);
    const size_t bytes = in_default.size() * sizeof(float);
    EXPECT_EQ(0, std::memcmp(first.data(), in_default.data(), bytes));
    EXPECT_EQ(0, std::memcmp(again.data(), in_default.data(), bytes));
    EXPECT_EQ(0, std::memcmp(after_release.data(), in_default.data(), bytes));
  }
}

}  // namespace
}  // namespace nanogpt
