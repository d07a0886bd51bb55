// GEMM correctness: every kernel on every ISA this CPU has, fp32 and bf16 (fp32 and bf16
// storage), all four transpose combinations, awkward shapes, alpha/beta, padded leading
// dimensions, NaN-poisoned outputs for beta = 0, an untouched guard region, the fused
// epilogue, empty products (M, N or K = 0) and negative sizes, and the NANOGPT_ISA rules.
//
// Error bounds. The reference sums the products in double; the kernels sum K products in fp32
// (AMX and VDPBF16PS in their own order), so |got − want| ≤ γ·(|alpha|·Σ_k|a_ik||b_kj| +
// |beta·C_ij|) with γ = (K + 2)·2⁻²⁴ from the K additions, the alpha multiply and the beta
// add. The tests allow 2γ. For bf16 the a and b are the operands rounded to bf16 (as the
// reference rounds them): a product of two bf16 is exact in fp32, so the bound is the same.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "kernels/bf16.hpp"
#include "kernels/gemm.hpp"
#include "kernels/gemm/blocking.hpp"
#include "kernels/gemm/driver.hpp"
#include "kernels/gemm/isa.hpp"
#include "kernels/gemm/microkernel.hpp"
#include "kernels/gemm/packed_b.hpp"
#include "kernels/gemm_bf16.hpp"
#include "runtime/aligned_memory.hpp"
#include "runtime/error.hpp"
#include "runtime/integer_math.hpp"
#include "runtime/thread_pool.hpp"
#include "runtime/workspace.hpp"
#include "support/kernels.hpp"
#include "support/reference.hpp"

namespace nanogpt {
namespace {

inline std::vector<float> random_matrix(size_t n, std::mt19937& rng) {
  // Non-zero values of both signs, spread over a few binades.
  std::uniform_real_distribution<float> u(0.25f, 2.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = (rng() & 1 ? 1.0f : -1.0f) * u(rng);
  return v;
}

struct Problem {
  Trans ta, tb;
  int64_t M, N, K;
  float alpha, beta;
  int64_t lda, ldb, ldc;
  std::vector<float> A, B, C0;

  Problem(Trans ta_, Trans tb_, int64_t M_, int64_t N_, int64_t K_, float alpha_, float beta_,
          uint32_t seed)
      : ta(ta_), tb(tb_), M(M_), N(N_), K(K_), alpha(alpha_), beta(beta_) {
    std::mt19937 rng(seed);
    lda = (ta == Trans::kNo ? K : M) + 3;  // ld > cols everywhere
    ldb = (tb == Trans::kNo ? N : K) + 5;
    ldc = N + 2;  // columns N, N+1 are a guard region
    A = random_matrix(static_cast<size_t>((ta == Trans::kNo ? M : K) * lda), rng);
    B = random_matrix(static_cast<size_t>((tb == Trans::kNo ? K : N) * ldb), rng);
    C0 = random_matrix(static_cast<size_t>(M * ldc), rng);
  }

  float a(int64_t i, int64_t k) const { return ta == Trans::kNo ? A[i * lda + k] : A[k * lda + i]; }
  float b(int64_t k, int64_t j) const { return tb == Trans::kNo ? B[k * ldb + j] : B[j * ldb + k]; }

  // The C a call starts from: beta = 0 must overwrite without reading, so its inside is NaN.
  std::vector<float> start_c() const {
    std::vector<float> c = C0;
    if (beta == 0.0f) {
      for (int64_t i = 0; i < M; ++i) {
        for (int64_t j = 0; j < N; ++j) c[i * ldc + j] = std::numeric_limits<float>::quiet_NaN();
      }
    }
    return c;
  }
};

// got must be within tol(i, j) of want inside M×N and equal C0 in the guard columns.
template <class Tol>
void expect_close(const Problem& p, const std::vector<float>& got, const std::vector<float>& want,
                  const Tol& tol, const std::string& what) {
  for (int64_t i = 0; i < p.M; ++i) {
    for (int64_t j = 0; j < p.ldc; ++j) {
      const size_t idx = static_cast<size_t>(i * p.ldc + j);
      if (j >= p.N) {
        ASSERT_EQ(got[idx], p.C0[idx]) << what << ": wrote outside C at " << i << "," << j;
        continue;
      }
      ASSERT_TRUE(std::isfinite(got[idx])) << what << " at " << i << "," << j;
      ASSERT_NEAR(got[idx], want[idx], tol(i, j)) << what << " at " << i << "," << j;
    }
  }
}

inline const char* trans_name(Trans t) {
  return t == Trans::kNo ? "N" : "T";
}

// The bound stated at the top, element by element.
struct Bound {
  const Problem& p;
  bool bf16;
  double operator()(int64_t i, int64_t j) const {
    double s = 0;
    for (int64_t k = 0; k < p.K; ++k) {
      const float a = bf16 ? round_to_bf16(p.a(i, k)) : p.a(i, k);
      const float b = bf16 ? round_to_bf16(p.b(k, j)) : p.b(k, j);
      s += std::abs(static_cast<double>(a) * b);
    }
    const double c = p.beta == 0.0f ? 0.0 : std::abs(p.beta * p.C0[i * p.ldc + j]);
    const double gamma = static_cast<double>(p.K + 2) * std::ldexp(1.0, -24);
    return 2 * gamma * (std::abs(p.alpha) * s + c) + 1e-30;
  }
};

std::string describe(const MicroKernel& k, const Problem& p, const char* what) {
  return std::string(what) + " " + k.isa + " " + trans_name(p.ta) + trans_name(p.tb) +
         " M=" + std::to_string(p.M) + " N=" + std::to_string(p.N) + " K=" + std::to_string(p.K) +
         " alpha=" + std::to_string(p.alpha) + " beta=" + std::to_string(p.beta);
}

// The reference's C for p: with bf16 products, on the operands rounded to bf16.
std::vector<float> reference_c(const Problem& p, bool bf16) {
  std::vector<float> want = p.C0;
  if (bf16) {
    reference_gemm_bf16(p.ta, p.tb, p.M, p.N, p.K, p.alpha, p.A.data(), p.lda, p.B.data(), p.ldb,
                        p.beta, want.data(), p.ldc);
  } else {
    reference_gemm(p.ta, p.tb, p.M, p.N, p.K, p.alpha, p.A.data(), p.lda, p.B.data(), p.ldb, p.beta,
                   want.data(), p.ldc);
  }
  return want;
}

void check_fp32(const MicroKernel& kernel, const Problem& p) {
  std::vector<float> got = p.start_c();
  gemm_with(kernel, p.ta, p.tb, p.M, p.N, p.K, p.alpha, p.A.data(), p.lda, p.B.data(), p.ldb,
            p.beta, got.data(), p.ldc);
  expect_close(p, got, reference_c(p, false), Bound{p, false}, describe(kernel, p, "fp32"));
}

void check_bf16(const MicroKernel& kernel, const Problem& p) {
  std::vector<float> got = p.start_c();
  gemm_bf16_with(kernel, p.ta, p.tb, p.M, p.N, p.K, p.alpha, p.A.data(), p.lda, p.B.data(), p.ldb,
                 p.beta, got.data(), p.ldc);
  expect_close(p, got, reference_c(p, true), Bound{p, true}, describe(kernel, p, "bf16"));
  // The same operands stored as bf16 are what packing from fp32 rounds to: identical bits.
  std::vector<bf16> a16(p.A.size()), b16(p.B.size());
  std::transform(p.A.begin(), p.A.end(), a16.begin(), [](float x) { return to_bf16(x); });
  std::transform(p.B.begin(), p.B.end(), b16.begin(), [](float x) { return to_bf16(x); });
  std::vector<float> got16 = p.start_c();
  gemm_bf16_with(kernel, p.ta, p.tb, p.M, p.N, p.K, p.alpha, a16.data(), p.lda, b16.data(), p.ldb,
                 p.beta, got16.data(), p.ldc);
  ASSERT_TRUE(same_bits(got, got16)) << describe(kernel, p, "bf16 storage");
  // A stored as bf16 and B as fp32 rounded while packing (the fused loss's bf16 gradient times
  // fp32 weights): the same bits again.
  std::vector<float> mixed = p.start_c();
  gemm_run(kernel, default_blocking(kernel, p.M, p.N, p.K, ThreadPool::current().size()),
           {PackSource::kBf16, PackSource::kF32ToBf16}, p.ta, p.tb, p.M, p.N, p.K, p.alpha,
           a16.data(), p.lda, p.B.data(), p.ldb, p.beta, mixed.data(), p.ldc, nullptr);
  ASSERT_TRUE(same_bits(got, mixed)) << describe(kernel, p, "bf16 A, fp32 B");
  // And the other way (a weight gradient's fp32 output gradient times a bf16 activation).
  mixed = p.start_c();
  gemm_run(kernel, default_blocking(kernel, p.M, p.N, p.K, ThreadPool::current().size()),
           {PackSource::kF32ToBf16, PackSource::kBf16}, p.ta, p.tb, p.M, p.N, p.K, p.alpha,
           p.A.data(), p.lda, b16.data(), p.ldb, p.beta, mixed.data(), p.ldc, nullptr);
  ASSERT_TRUE(same_bits(got, mixed)) << describe(kernel, p, "fp32 A, bf16 B");
}

constexpr float kAlphaBeta[][2] = {{1.0f, 0.0f}, {0.5f, 1.0f}, {-2.0f, 0.5f}};

TEST(Gemm, EveryFp32KernelMatchesReferenceOnAwkwardShapes) {
  uint32_t seed = 1;
  for (const MicroKernel& kernel : available_microkernels()) {
    for (Trans ta : {Trans::kNo, Trans::kYes}) {
      for (Trans tb : {Trans::kNo, Trans::kYes}) {
        int variant = 0;
        for (int64_t M : {1, 7, 33, 129}) {
          for (int64_t N : {1, 31, 127}) {
            for (int64_t K : {1, 7, 33, 300}) {
              const float* ab = kAlphaBeta[variant++ % 3];
              check_fp32(kernel, Problem(ta, tb, M, N, K, ab[0], ab[1], seed++));
            }
          }
        }
        check_fp32(kernel, Problem(ta, tb, 257, 129, 513, 0.5f, 1.0f, seed++));
      }
    }
  }
}

TEST(Gemm, EveryBf16KernelMatchesReferenceOnAwkwardShapes) {
  uint32_t seed = 1000;
  for (const MicroKernel& kernel : bf16_microkernels_under_test()) {
    for (Trans ta : {Trans::kNo, Trans::kYes}) {
      for (Trans tb : {Trans::kNo, Trans::kYes}) {
        int variant = 0;
        for (int64_t M : {1, 7, 31, 33, 129}) {
          for (int64_t N : {1, 31, 33, 127}) {
            for (int64_t K : {1, 2, 31, 32, 33, 300}) {
              const float* ab = kAlphaBeta[variant++ % 3];
              check_bf16(kernel, Problem(ta, tb, M, N, K, ab[0], ab[1], seed++));
            }
          }
        }
        check_bf16(kernel, Problem(ta, tb, 257, 257, 1037, 1.0f, 1.0f, seed++));
      }
    }
  }
}

// One way into the GEMM on fp32-held operands: a public entry point, or one kernel through
// the _with entries; bf16 storage converts A and B first (a null operand stays null).
struct Entry {
  std::string name;
  std::function<void(Trans, Trans, int64_t, int64_t, int64_t, float, const float*, int64_t,
                     const float*, int64_t, float, float*, int64_t, const GemmEpilogue*)>
      run;
};

// The stored rows × ld values of x as bf16 (none for negative rows), or null for a null x.
struct Bf16Copy {
  std::vector<bf16> values;
  const bf16* data = nullptr;
  Bf16Copy(const float* x, int64_t rows, int64_t ld) {
    if (x == nullptr) return;
    values.resize(static_cast<size_t>(std::max<int64_t>(rows, 0) * ld));
    for (size_t i = 0; i < values.size(); ++i) values[i] = to_bf16(x[i]);
    data = values.data();
  }
};

std::vector<Entry> every_entry() {
  std::vector<Entry> out;
  out.push_back({"gemm", [](Trans ta, Trans tb, int64_t M, int64_t N, int64_t K, float alpha,
                            const float* A, int64_t lda, const float* B, int64_t ldb, float beta,
                            float* C, int64_t ldc, const GemmEpilogue* ep) {
                   gemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, ep);
                 }});
  out.push_back({"gemm_bf16", [](Trans ta, Trans tb, int64_t M, int64_t N, int64_t K, float alpha,
                                 const float* A, int64_t lda, const float* B, int64_t ldb,
                                 float beta, float* C, int64_t ldc, const GemmEpilogue* ep) {
                   gemm_bf16(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, ep);
                 }});
  out.push_back({"gemm_bf16 bf16 storage",
                 [](Trans ta, Trans tb, int64_t M, int64_t N, int64_t K, float alpha,
                    const float* A, int64_t lda, const float* B, int64_t ldb, float beta, float* C,
                    int64_t ldc, const GemmEpilogue* ep) {
                   const Bf16Copy a(A, ta == Trans::kNo ? M : K, lda);
                   const Bf16Copy b(B, tb == Trans::kNo ? K : N, ldb);
                   gemm_bf16(ta, tb, M, N, K, alpha, a.data, lda, b.data, ldb, beta, C, ldc, ep);
                 }});
  out.push_back({"gemm_bf16 bf16 A, fp32 B",
                 [](Trans ta, Trans tb, int64_t M, int64_t N, int64_t K, float alpha,
                    const float* A, int64_t lda, const float* B, int64_t ldb, float beta, float* C,
                    int64_t ldc, const GemmEpilogue* ep) {
                   const Bf16Copy a(A, ta == Trans::kNo ? M : K, lda);
                   gemm_bf16(ta, tb, M, N, K, alpha, a.data, lda, B, ldb, beta, C, ldc, ep);
                 }});
  for (const MicroKernel& kernel : available_microkernels()) {
    out.push_back({std::string("gemm_with ") + kernel.isa,
                   [kernel](Trans ta, Trans tb, int64_t M, int64_t N, int64_t K, float alpha,
                            const float* A, int64_t lda, const float* B, int64_t ldb, float beta,
                            float* C, int64_t ldc, const GemmEpilogue* ep) {
                     gemm_with(kernel, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, ep);
                   }});
  }
  for (const MicroKernel& kernel : bf16_microkernels_under_test()) {
    out.push_back({std::string("gemm_bf16_with ") + kernel.isa,
                   [kernel](Trans ta, Trans tb, int64_t M, int64_t N, int64_t K, float alpha,
                            const float* A, int64_t lda, const float* B, int64_t ldb, float beta,
                            float* C, int64_t ldc, const GemmEpilogue* ep) {
                     gemm_bf16_with(kernel, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc,
                                    ep);
                   }});
    out.push_back({std::string("gemm_bf16_with bf16 storage ") + kernel.isa,
                   [kernel](Trans ta, Trans tb, int64_t M, int64_t N, int64_t K, float alpha,
                            const float* A, int64_t lda, const float* B, int64_t ldb, float beta,
                            float* C, int64_t ldc, const GemmEpilogue* ep) {
                     const Bf16Copy a(A, ta == Trans::kNo ? M : K, lda);
                     const Bf16Copy b(B, tb == Trans::kNo ? K : N, ldb);
                     gemm_bf16_with(kernel, ta, tb, M, N, K, alpha, a.data, lda, b.data, ldb, beta,
                                    C, ldc, ep);
                   }});
  }
  return out;
}

struct Shape {
  int64_t M, N, K;
};
constexpr Shape kEmptyShapes[] = {{0, 5, 7}, {5, 0, 7}, {0, 0, 7}, {0, 5, 0}, {5, 0, 0}};

// K so deep that a superblock of B one nc = 2·nr wide, packed over all of K, passes the
// driver's 4 MiB: the driver takes K in passes of whole kc blocks, carrying all of C's
// accumulators from pass to pass (gemm/driver.cpp). The result is within the bound of the
// reference, has the bits of the same product with nc = nr (whose superblock fits, so one
// pass) and of the passes over a B packed beforehand (read from each pass's first k), and
// leaves the guard columns alone, for an i-major and a k-major source of each operand.
TEST(Gemm, DeepKTakenInPassesMatchesTheReferenceAndOnePass) {
  ThreadPool two(2);
  ThreadPool::Use use(two);
  uint32_t seed = 4000;
  for (const auto& [kernel, source] : every_gemm_kernel()) {
    const bool bf16 = source == PackSource::kF32ToBf16;
    const int64_t panel_bytes_per_k = kernel.nr * kernel.packed_bytes;
    // One nr-wide superblock of 3 MiB, so 2·nr wide is 6 MiB; K off any step or block.
    const int64_t K = (int64_t{3} << 20) / panel_bytes_per_k + 5;
    const int64_t M = kernel.mr + 3, N = 2 * kernel.nr;
    for (Trans t : {Trans::kNo, Trans::kYes}) {
      const Problem p(t, t, M, N, K, 0.5f, 1.0f, seed++);
      auto run = [&](int64_t nc) {
        std::vector<float> c = p.start_c();
        gemm_run(kernel, {kernel.mr, nc, 256}, source, p.ta, p.tb, p.M, p.N, p.K, p.alpha,
                 p.A.data(), p.lda, p.B.data(), p.ldb, p.beta, c.data(), p.ldc, nullptr);
        return c;
      };
      const std::vector<float> passes = run(2 * kernel.nr), one_pass = run(kernel.nr);
      const std::vector<float> want = reference_c(p, bf16);
      expect_close(p, passes, want, Bound{p, bf16}, describe(kernel, p, "deep K in passes"));
      EXPECT_TRUE(same_bits(passes, one_pass)) << describe(kernel, p, "passes vs one pass");
      PackedB packed;
      pack_b_operand(kernel, source, p.tb, p.K, p.N, p.B.data(), p.ldb, packed);
      std::vector<float> given = p.start_c();
      gemm_run_packed_b(kernel, {kernel.mr, 2 * kernel.nr, 256}, source, p.ta, p.M, p.N, p.alpha,
                        p.A.data(), p.lda, packed, p.beta, given.data(), p.ldc, nullptr);
      EXPECT_TRUE(same_bits(given, one_pass)) << describe(kernel, p, "packed B in passes");
    }
  }
}

// A B of 2 MiB packed, read whole by every row block's task (one column block), is packed one
// panel at a time by the tasks together (run_product's b_one_at_a_time): the reference's
// values, and the bits of the same product with two column blocks (B packed as sets).
TEST(Gemm, LargeSharedBPackedPanelByPanelGivesTheBitsOfSets) {
  ThreadPool two(2);
  ThreadPool::Use use(two);
  uint32_t seed = 4500;
  for (const auto& [kernel, source] : every_gemm_kernel()) {
    const bool bf16 = source == PackSource::kF32ToBf16;
    const int64_t N = 2 * kernel.nr;
    const int64_t K = (int64_t{2} << 20) / (N * kernel.packed_bytes) + 3;
    const int64_t M = 4 * kernel.mr + 1;
    for (Trans t : {Trans::kNo, Trans::kYes}) {
      const Problem p(t, t, M, N, K, 1.5f, 0.0f, seed++);
      auto run = [&](int64_t nc) {
        std::vector<float> c = p.start_c();
        gemm_run(kernel, {kernel.mr, nc, 8192}, source, p.ta, p.tb, p.M, p.N, p.K, p.alpha,
                 p.A.data(), p.lda, p.B.data(), p.ldb, p.beta, c.data(), p.ldc, nullptr);
        return c;
      };
      const std::vector<float> shared = run(N), sets = run(kernel.nr);
      const std::vector<float> want = reference_c(p, bf16);
      expect_close(p, shared, want, Bound{p, bf16}, describe(kernel, p, "B panel by panel"));
      EXPECT_TRUE(same_bits(shared, sets)) << describe(kernel, p, "panel by panel vs sets");
    }
  }
}

// A kernel that reads a bf16, k-contiguous A in place (MicroKernel::fn_a_rows: AMX) gives the
// bits of the same product packing A from fp32 rounded to bf16, within the reference's bound:
// several K blocks, deep K in passes, padded lda, a partial last panel (packed) after full ones
// (read in place), beta = 0 and 1, on the hardware and on its software model; and it packs no
// A where M fills whole panels (the workspace holds that much less).
TEST(Gemm, Bf16ARowsReadInPlaceGiveThePackedProductsBits) {
  ThreadPool two(2);
  ThreadPool::Use use(two);
  uint32_t seed = 4500;
  int kernels_with_rows = 0;
  for (const MicroKernel& kernel : bf16_microkernels_and_tile_model()) {
    if (kernel.fn_a_rows == nullptr) continue;
    ++kernels_with_rows;
    const int64_t step = kernel.k_step;
    // K of one step, several kc = 64 blocks, and deep enough for passes (2·nr columns of B
    // over K pass 4 MiB).
    const int64_t deep = round_up((int64_t{5} << 20) / (2 * kernel.nr * kernel.packed_bytes), step);
    for (const auto& [M, N, K, kc] : {std::array<int64_t, 4>{kernel.mr, kernel.nr, step, 64},
                                      {3 * kernel.mr + 5, 2 * kernel.nr + 3, 5 * step, 64},
                                      {2 * kernel.mr, kernel.nr + 1, 12 * step, 128},
                                      {kernel.mr + 7, 2 * kernel.nr, deep, 256}}) {
      for (float beta : {0.0f, 1.0f}) {
        const Problem p(Trans::kNo, Trans::kYes, M, N, K, 0.75f, beta, seed++);
        std::vector<bf16> a16(p.A.size());
        std::transform(p.A.begin(), p.A.end(), a16.begin(), [](float x) { return to_bf16(x); });
        const GemmBlocking blocking{kernel.mr, 2 * kernel.nr, kc};
        std::vector<float> packed = p.start_c(), in_place = p.start_c();
        gemm_run(kernel, blocking, PackSource::kF32ToBf16, p.ta, p.tb, M, N, K, p.alpha, p.A.data(),
                 p.lda, p.B.data(), p.ldb, beta, packed.data(), p.ldc, nullptr);
        gemm_run(kernel, blocking, {PackSource::kBf16, PackSource::kF32ToBf16}, p.ta, p.tb, M, N, K,
                 p.alpha, a16.data(), p.lda, p.B.data(), p.ldb, beta, in_place.data(), p.ldc,
                 nullptr);
        std::vector<float> want = p.C0;
        reference_gemm_bf16(p.ta, p.tb, M, N, K, p.alpha, p.A.data(), p.lda, p.B.data(), p.ldb,
                            beta, want.data(), p.ldc);
        expect_close(p, in_place, want, Bound{p, true}, describe(kernel, p, "A rows in place"));
        EXPECT_TRUE(same_bits(in_place, packed)) << describe(kernel, p, "in place vs packed A");
      }
    }
    // Whole panels: the in-place product's workspace holds no packed A, the packing one's
    // holds M·K bf16 of it.
    const int64_t M = 2 * kernel.mr, N = kernel.nr, K = 8 * step;
    const Problem p(Trans::kNo, Trans::kYes, M, N, K, 1.0f, 0.0f, seed++);
    std::vector<bf16> a16(p.A.size());
    std::transform(p.A.begin(), p.A.end(), a16.begin(), [](float x) { return to_bf16(x); });
    auto held = [&](PackSources sources, const void* a) {
      Workspace ws("test");
      Workspace::Use use_ws(ws);
      std::vector<float> c = p.start_c();
      gemm_run(kernel, {kernel.mr, kernel.nr, K}, sources, p.ta, p.tb, M, N, K, 1.0f, a, p.lda,
               p.B.data(), p.ldb, 0.0f, c.data(), p.ldc, nullptr);
      return ws.bytes_held();
    };
    const size_t packing = held(PackSource::kF32ToBf16, p.A.data());
    const size_t in_place = held({PackSource::kBf16, PackSource::kF32ToBf16}, a16.data());
    EXPECT_EQ(packing - in_place, static_cast<size_t>(M * K * kernel.packed_bytes)) << kernel.isa;
  }
  if (kernels_with_rows == 0) GTEST_SKIP() << "no kernel under test reads A in place here";
}

// A kernel that finishes a tile's last K block itself, from its registers
// (MicroKernel::fn_finishing: the vector kernels, for products without an epilogue or with an
// addend alone) or by storing
// the sum straight into C where finishing would copy it (fn_to_c: AMX's tile stores, for alpha
// 1, beta 0), gives the bits of the same kernel storing every tile's sum and finishing it from
// the accumulator, within the reference's bound: whole and partial tiles, one K block and
// several, deep K in passes, alpha and beta that scale or add to C, A packed (either
// orientation) and read in place. On the hardware and on the tile unit's software model.
TEST(Gemm, TilesFinishedInTheKernelGiveTheFinishedBits) {
  ThreadPool two(2);
  ThreadPool::Use use(two);
  uint32_t seed = 4700;
  int kernels_finishing = 0;
  for (const MicroKernel& kernel : bf16_microkernels_and_tile_model()) {
    if (kernel.fn_to_c == nullptr && kernel.fn_finishing == nullptr) continue;
    ++kernels_finishing;
    MicroKernel finishing = kernel;
    finishing.fn_to_c = nullptr;
    finishing.fn_finishing = nullptr;
    const int64_t step = kernel.k_step;
    const int64_t deep = round_up((int64_t{5} << 20) / (2 * kernel.nr * kernel.packed_bytes), step);
    // One K block with whole tiles among partial ones (a whole tile's sum goes to C between two
    // finished late), several blocks, deep K in passes.
    for (const auto& [M, N, K, kc] : {std::array<int64_t, 4>{kernel.mr, kernel.nr, step, 64},
                                      {3 * kernel.mr + 5, 2 * kernel.nr + 3, 2 * step, 256},
                                      {3 * kernel.mr + 5, 2 * kernel.nr + 3, 5 * step, 64},
                                      {2 * kernel.mr, kernel.nr + 1, 12 * step, 128},
                                      {kernel.mr + 7, 2 * kernel.nr, deep, 256}}) {
      for (const auto& [alpha, beta] : {std::pair{1.0f, 0.0f}, {0.75f, 0.0f}, {1.0f, 1.0f}}) {
        for (const Trans ta : {Trans::kNo, Trans::kYes}) {
          // Deep K (slow on the software model) only for alpha 1, beta 0, A as stored.
          if (K == deep && (alpha != 1.0f || beta != 0.0f || ta != Trans::kNo)) continue;
          const Problem p(ta, Trans::kYes, M, N, K, alpha, beta, seed++);
          std::vector<bf16> a16(p.A.size());
          std::transform(p.A.begin(), p.A.end(), a16.begin(), [](float x) { return to_bf16(x); });
          // Two panels of rows a task: a partial panel below a whole one.
          const GemmBlocking blocking{2 * kernel.mr, 2 * kernel.nr, kc};
          // A packed from fp32, and (k-contiguous) read in place from bf16.
          std::vector<std::pair<PackSources, const void*>> inputs = {
              {PackSource::kF32ToBf16, p.A.data()}};
          if (ta == Trans::kNo)
            inputs.push_back({{PackSource::kBf16, PackSource::kF32ToBf16}, a16.data()});
          // An addend (Newton–Schulz's a·X), the one epilogue finished in the kernel too.
          const int64_t ld_d = N + 5;
          std::mt19937 rng(seed + 3000);
          const std::vector<float> d = random_matrix(static_cast<size_t>(M * ld_d), rng);
          GemmEpilogue add;
          add.addend = d.data();
          add.ld_addend = ld_d;
          add.addend_scale = -0.625f;
          for (const auto& [sources, a] : inputs) {
            std::vector<float> in_kernel = p.start_c(), finished = p.start_c();
            gemm_run(kernel, blocking, sources, p.ta, p.tb, M, N, K, alpha, a, p.lda, p.B.data(),
                     p.ldb, beta, in_kernel.data(), p.ldc, nullptr);
            gemm_run(finishing, blocking, sources, p.ta, p.tb, M, N, K, alpha, a, p.lda, p.B.data(),
                     p.ldb, beta, finished.data(), p.ldc, nullptr);
            std::vector<float> want = p.C0;
            reference_gemm_bf16(p.ta, p.tb, M, N, K, alpha, p.A.data(), p.lda, p.B.data(), p.ldb,
                                beta, want.data(), p.ldc);
            const char* what = sources.a == PackSource::kBf16 ? "finished in the kernel, A in place"
                                                              : "finished in the kernel, A packed";
            expect_close(p, in_kernel, want, Bound{p, true}, describe(kernel, p, what));
            EXPECT_TRUE(same_bits(in_kernel, finished))
                << describe(kernel, p, what) << " vs finished";
            std::vector<float> added_in_kernel = p.start_c(), added_finished = p.start_c();
            gemm_run(kernel, blocking, sources, p.ta, p.tb, M, N, K, alpha, a, p.lda, p.B.data(),
                     p.ldb, beta, added_in_kernel.data(), p.ldc, &add);
            gemm_run(finishing, blocking, sources, p.ta, p.tb, M, N, K, alpha, a, p.lda, p.B.data(),
                     p.ldb, beta, added_finished.data(), p.ldc, &add);
            EXPECT_TRUE(same_bits(added_in_kernel, added_finished))
                << describe(kernel, p, what) << " with an addend vs finished";
            // And the addend is there: its fma on the plain product's bits.
            for (int64_t i = 0; i < M; ++i) {
              for (int64_t j = 0; j < N; ++j) {
                const size_t at = static_cast<size_t>(i * p.ldc + j);
                ASSERT_EQ(added_in_kernel[at],
                          std::fma(-0.625f, d[static_cast<size_t>(i * ld_d + j)], in_kernel[at]))
                    << describe(kernel, p, what) << " " << i << "," << j;
              }
            }
          }
        }
      }
    }
  }
  if (kernels_finishing == 0) GTEST_SKIP() << "no kernel under test finishes its own tiles here";
}

// A blocking of row parts splits whatever M it is fitted to into that many blocks of equal
// height (to mr), unlike a fixed mc, whose last block is short when mc does not divide M; the
// autotuner offers such blockings, named apart from fixed-mc ones, and they give the bits of a
// fixed-mc blocking.
TEST(GemmBlocking, RowPartsSplitEveryHeightIntoEqualBlocks) {
  const MicroKernel& kernel = active_microkernel();
  const int64_t mr = kernel.mr;
  for (int64_t parts : {2, 4, 8}) {
    for (int64_t M : {int64_t{256}, int64_t{768}, int64_t{1000}, 3 * mr + 1}) {
      GemmBlocking b{0, kernel.nr, 256};
      b.row_parts = parts;
      const GemmBlocking fit = normalized(b, kernel, M, 4 * kernel.nr, 512);
      EXPECT_EQ(fit.row_parts, 0);
      EXPECT_EQ(fit.mc % mr, 0);
      const int64_t blocks = (M + fit.mc - 1) / fit.mc;
      EXPECT_LE(blocks, parts) << "M " << M << ", " << parts << " parts";
      // Equal to the kernel's step: no block but the last is taller, and the last is at most
      // mr shorter per block (the rounding up of each).
      const int64_t last = M - (blocks - 1) * fit.mc;
      EXPECT_GT(last + blocks * mr, fit.mc) << "M " << M << ", " << parts << " parts";
    }
  }
  GemmBlocking parts4{0, 64, 256};
  parts4.row_parts = 4;
  EXPECT_EQ(parts4.name(), "rows4_nc64_kc256");
  EXPECT_EQ((GemmBlocking{96, 64, 256}.name()), "mc96_nc64_kc256");
  // Among the candidates, and with a fixed-mc blocking's bits.
  const std::vector<GemmBlocking> all = blocking_candidates(kernel, 256, 1024, 8192, 2);
  EXPECT_TRUE(
      std::any_of(all.begin(), all.end(), [](const GemmBlocking& c) { return c.row_parts == 2; }));
  ThreadPool two(2);
  ThreadPool::Use use(two);
  const Problem p(Trans::kYes, Trans::kNo, 7 * mr + 3, 3 * kernel.nr + 1, 300, 1.0f, 0.5f, 4100);
  auto run = [&](const GemmBlocking& blocking) {
    std::vector<float> c = p.start_c();
    gemm_run(kernel, blocking, PackSource::kF32, p.ta, p.tb, p.M, p.N, p.K, p.alpha, p.A.data(),
             p.lda, p.B.data(), p.ldb, p.beta, c.data(), p.ldc, nullptr);
    return c;
  };
  GemmBlocking parts2{0, kernel.nr, 128};
  parts2.row_parts = 2;
  EXPECT_TRUE(same_bits(run(parts2), run({mr, kernel.nr, 128})));
}

TEST(Gemm, EmptyOutputTouchesNothingOnEveryEntry) {
  // M = 0 or N = 0 (with K = 0 or not): no C, so nothing is written, not even the epilogue's
  // bf16 copy, and null pointers are never followed.
  std::mt19937 rng(5);
  const std::vector<float> A = random_matrix(64, rng), B = random_matrix(64, rng);
  const std::vector<float> C0 = random_matrix(64, rng);
  const std::vector<bf16> copy0(64, to_bf16(3.0f));
  for (const Entry& entry : every_entry()) {
    for (Trans ta : {Trans::kNo, Trans::kYes}) {
      for (Trans tb : {Trans::kNo, Trans::kYes}) {
        for (const Shape& shape : kEmptyShapes) {
          const auto [M, N, K] = shape;
          const std::string what = entry.name + " " + trans_name(ta) + trans_name(tb) +
                                   " M=" + std::to_string(M) + " N=" + std::to_string(N) +
                                   " K=" + std::to_string(K);
          const int64_t ld = 8;  // at least every extent above
          EXPECT_NO_THROW(entry.run(ta, tb, M, N, K, 1.0f, nullptr, ld, nullptr, ld, 0.0f, nullptr,
                                    ld, nullptr))
              << what;
          std::vector<float> c = C0;
          std::vector<bf16> copy = copy0;
          GemmEpilogue ep;
          ep.relu_squared = true;
          ep.c_bf16 = copy.data();
          ep.ld_c_bf16 = ld;
          entry.run(ta, tb, M, N, K, 1.0f, A.data(), ld, B.data(), ld, 0.0f, c.data(), ld, &ep);
          EXPECT_TRUE(same_bits(c, C0)) << what;
          EXPECT_EQ(std::memcmp(copy.data(), copy0.data(), copy.size() * sizeof(bf16)), 0) << what;
        }
      }
    }
  }
}

TEST(Gemm, ZeroDepthScalesCOnEveryEntry) {
  // K = 0: C = beta·C exactly (beta = 0: zeros, C not read; beta = 1: C as it was), then the
  // epilogue; the guard columns untouched.
  constexpr int64_t M = 33, N = 45;
  constexpr int64_t lda = M + 3, ldb = N + 5;  // at least every extent, whatever the transposes
  std::mt19937 rng(9);
  const std::vector<float> A = random_matrix(static_cast<size_t>(M * lda), rng);
  const std::vector<float> B = random_matrix(static_cast<size_t>(N * ldb), rng);
  for (const Entry& entry : every_entry()) {
    uint32_t seed = 40;
    for (Trans ta : {Trans::kNo, Trans::kYes}) {
      for (Trans tb : {Trans::kNo, Trans::kYes}) {
        for (float beta : {0.0f, 0.5f, 1.0f}) {
          for (bool relu : {false, true}) {
            const Problem p(Trans::kNo, Trans::kNo, M, N, 1, -1.5f, beta, seed++);
            const std::string what = entry.name + " " + trans_name(ta) + trans_name(tb) +
                                     " beta=" + std::to_string(beta) + (relu ? " relu²" : "");
            GemmEpilogue ep;
            ep.relu_squared = relu;
            std::vector<float> got = p.start_c();
            entry.run(ta, tb, M, N, 0, p.alpha, A.data(), lda, B.data(), ldb, beta, got.data(),
                      p.ldc, relu ? &ep : nullptr);
            for (int64_t i = 0; i < M; ++i) {
              for (int64_t j = 0; j < p.ldc; ++j) {
                const size_t idx = static_cast<size_t>(i * p.ldc + j);
                float want = p.C0[idx];
                if (j < N) {
                  want = beta == 0.0f ? 0.0f : beta * p.C0[idx];
                  if (relu) want = std::max(want, 0.0f) * std::max(want, 0.0f);
                }
                ASSERT_EQ(got[idx], want) << what << " at " << i << "," << j;
              }
            }
          }
        }
      }
    }
  }
}

struct NegativeCase {
  int64_t M, N, K;
  const char* name;  // the negative one
  int64_t value;
};
constexpr NegativeCase kNegativeCases[] = {
    {-1, 4, 4, "M", -1}, {4, -2, 4, "N", -2}, {4, 4, -3, "K", -3}};

TEST(Gemm, NegativeDimensionIsAnInputError) {
  std::vector<float> A(64, 1.0f), B(64, 1.0f), C(64, 0.0f);
  for (const Entry& entry : every_entry()) {
    for (const NegativeCase& bad : kNegativeCases) {
      const auto [M, N, K, name, value] = bad;
      try {
        entry.run(Trans::kNo, Trans::kNo, M, N, K, 1.0f, A.data(), 8, B.data(), 8, 0.0f, C.data(),
                  8, nullptr);
        ADD_FAILURE() << entry.name << ": no InputError for a negative " << name;
      } catch (const InputError& e) {
        const std::string message = e.what();
        EXPECT_NE(message.find(std::string(name) + " = " + std::to_string(value) + " is negative"),
                  std::string::npos)
            << entry.name << ": " << message;
      }
    }
  }
}

// C = alpha·op(A)·op(B) + beta·C of problem p on one kernel, fp32 or bf16, with an epilogue.
void run_with(const MicroKernel& kernel, bool bf16_gemm, const Problem& p, std::vector<float>& c,
              const GemmEpilogue* ep) {
  if (bf16_gemm) {
    gemm_bf16_with(kernel, p.ta, p.tb, p.M, p.N, p.K, p.alpha, p.A.data(), p.lda, p.B.data(), p.ldb,
                   p.beta, c.data(), p.ldc, ep);
  } else {
    gemm_with(kernel, p.ta, p.tb, p.M, p.N, p.K, p.alpha, p.A.data(), p.lda, p.B.data(), p.ldb,
              p.beta, c.data(), p.ldc, ep);
  }
}

// The fused epilogue makes C max(C, 0)² in place and writes bf16 of that final C, inside M×N
// only: bit for bit the plain product's C so transformed.
void check_epilogue(const MicroKernel& kernel, bool bf16_gemm, Trans ta, Trans tb, uint32_t seed) {
  Problem p(ta, tb, 45, 77, 70, 1.0f, 0.5f, seed);
  const int64_t ld_h = p.N + 5;
  std::vector<bf16> half(static_cast<size_t>(p.M * ld_h), bf16{0x1234});
  GemmEpilogue ep;
  ep.relu_squared = true;
  ep.c_bf16 = half.data();
  ep.ld_c_bf16 = ld_h;
  std::vector<float> got = p.C0, plain = p.C0;
  run_with(kernel, bf16_gemm, p, got, &ep);
  run_with(kernel, bf16_gemm, p, plain, nullptr);
  size_t negative = 0;
  for (int64_t i = 0; i < p.M; ++i) {
    for (int64_t j = 0; j < p.ldc; ++j) {
      const size_t idx = static_cast<size_t>(i * p.ldc + j);
      if (j >= p.N) {
        ASSERT_EQ(got[idx], p.C0[idx]) << kernel.isa << " wrote outside N at " << i << "," << j;
        continue;
      }
      const float r = std::max(plain[idx], 0.0f);
      negative += plain[idx] < 0.0f;
      ASSERT_EQ(got[idx], r * r) << kernel.isa << " " << i << "," << j;
    }
    for (int64_t j = 0; j < ld_h; ++j) {
      const float c = got[i * p.ldc + std::min(j, p.N - 1)];
      ASSERT_EQ(half[i * ld_h + j].bits, j < p.N ? to_bf16(c).bits : 0x1234)
          << kernel.isa << " " << i << "," << j;
    }
  }
  EXPECT_GT(negative, 0u) << "the test wants products of both signs";
}

TEST(Gemm, FusedEpilogueOnEveryKernel) {
  uint32_t seed = 77;
  for (Trans ta : {Trans::kNo, Trans::kYes}) {
    for (Trans tb : {Trans::kNo, Trans::kYes}) {
      for (const MicroKernel& k : available_microkernels())
        check_epilogue(k, false, ta, tb, seed++);
      for (const MicroKernel& k : bf16_microkernels_under_test())
        check_epilogue(k, true, ta, tb, seed++);
    }
  }
}

// c_bf16_only: the bf16 copy alone, C null and never followed, is bit for bit the copy written
// beside C, with the relu² gradient epilogue (as the MLP's backward uses it) and without; on a
// small shape, and on one whose C (8 MiB) takes the driver's non-temporal path where the kernel
// has one: with the copy's rows on cache lines (ld_copy = N, the copy streamed as well) and
// off them (cached stores). Columns of the copy past N stay untouched.
void check_bf16_only(const MicroKernel& kernel, bool bf16_gemm, Trans ta, Trans tb, int64_t M,
                     int64_t N, int64_t K, uint32_t seed, int64_t ld_copy) {
  const Problem p(ta, tb, M, N, K, 0.75f, 0.0f, seed);
  std::mt19937 rng(seed + 3000);
  const std::vector<float> h = random_matrix(static_cast<size_t>(M * N), rng);  // both signs
  const std::string what = std::string(kernel.isa) + (bf16_gemm ? " bf16 " : " fp32 ") +
                           trans_name(ta) + trans_name(tb) + " " + std::to_string(M) + "x" +
                           std::to_string(N) + "x" + std::to_string(K);
  for (bool relu_grad : {false, true}) {
    // Aligned, so that with ld_copy a multiple of 32 the copy's rows start on cache lines.
    AlignedVector<bf16> want(static_cast<size_t>(M * ld_copy), bf16{0x1234}), got = want;
    GemmEpilogue beside, alone;
    for (GemmEpilogue* ep : {&beside, &alone}) {
      ep->relu_squared_output = relu_grad ? h.data() : nullptr;
      ep->ld_relu_squared_output = N;
      ep->ld_c_bf16 = ld_copy;
    }
    beside.c_bf16 = want.data();
    alone.c_bf16 = got.data();
    alone.c_bf16_only = true;
    std::vector<float> c = p.C0;
    run_with(kernel, bf16_gemm, p, c, &beside);
    // ldc N (no C to stride): a multiple of 16 on the large shape, as the streamed path wants.
    if (bf16_gemm) {
      gemm_bf16_with(kernel, ta, tb, M, N, K, p.alpha, p.A.data(), p.lda, p.B.data(), p.ldb, 0.0f,
                     nullptr, N, &alone);
    } else {
      gemm_with(kernel, ta, tb, M, N, K, p.alpha, p.A.data(), p.lda, p.B.data(), p.ldb, 0.0f,
                nullptr, N, &alone);
    }
    ASSERT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(bf16)), 0)
        << what << (relu_grad ? " relu² gradient" : "");
    // Nonzero values written (the relu² gradient zeroes about half: H has both signs).
    const auto written = std::count_if(want.begin(), want.end(), [](bf16 v) {
      return (v.bits & 0x7FFF) != 0 && v.bits != 0x1234;
    });
    EXPECT_GT(written, M * N / 3) << what << ": the copy should hold the product's values";
  }
}

TEST(Gemm, Bf16CopyAloneOnEveryKernel) {
  uint32_t seed = 311;
  for (Trans ta : {Trans::kNo, Trans::kYes}) {
    for (Trans tb : {Trans::kNo, Trans::kYes}) {
      for (const MicroKernel& k : available_microkernels())
        check_bf16_only(k, false, ta, tb, 45, 77, 70, seed++, 80);
      for (const MicroKernel& k : bf16_microkernels_under_test())
        check_bf16_only(k, true, ta, tb, 45, 77, 70, seed++, 80);
    }
  }
  // C of 512 × 4096 floats is the driver's 8 MiB line for storing C non-temporally.
  for (int64_t ld_copy : {4096, 4099}) {
    for (const MicroKernel& k : available_microkernels())
      if (k.stream != nullptr)
        check_bf16_only(k, false, Trans::kNo, Trans::kNo, 512, 4096, 32, 7, ld_copy);
    for (const MicroKernel& k : bf16_microkernels_under_test())
      if (k.stream != nullptr)
        check_bf16_only(k, true, Trans::kNo, Trans::kNo, 512, 4096, 64, 8, ld_copy);
  }
}

TEST(Gemm, Bf16CopyAloneRefusesACOrABeta) {
  const Problem p(Trans::kNo, Trans::kNo, 8, 8, 8, 1.0f, 0.0f, 5);
  std::vector<bf16> copy(64);
  std::vector<float> c = p.C0;
  GemmEpilogue ep;
  ep.c_bf16 = copy.data();
  ep.ld_c_bf16 = 8;
  ep.c_bf16_only = true;
  // A C given: the caller expects it written.
  EXPECT_THROW(gemm_bf16(Trans::kNo, Trans::kNo, 8, 8, 8, 1.0f, p.A.data(), p.lda, p.B.data(),
                         p.ldb, 0.0f, c.data(), p.ldc, &ep),
               std::invalid_argument);
  // beta would read C, which is not there.
  EXPECT_THROW(gemm_bf16(Trans::kNo, Trans::kNo, 8, 8, 8, 1.0f, p.A.data(), p.lda, p.B.data(),
                         p.ldb, 0.5f, nullptr, p.ldc, &ep),
               std::invalid_argument);
  ep.c_bf16 = nullptr;  // nowhere to write at all
  EXPECT_THROW(gemm(Trans::kNo, Trans::kNo, 8, 8, 8, 1.0f, p.A.data(), p.lda, p.B.data(), p.ldb,
                    0.0f, nullptr, p.ldc, &ep),
               std::invalid_argument);
}

// The relu² output is read in one precision: an epilogue given it in both is refused.
TEST(Gemm, ReluSquaredOutputInBothPrecisionsIsRefused) {
  const Problem p(Trans::kNo, Trans::kNo, 8, 8, 8, 1.0f, 0.0f, 6);
  std::vector<float> h(64, 1.0f), c = p.C0;
  std::vector<bf16> h16(64, to_bf16(1.0f));
  GemmEpilogue ep;
  ep.relu_squared_output = h.data();
  ep.relu_squared_output_bf16 = h16.data();
  ep.ld_relu_squared_output = 8;
  EXPECT_THROW(gemm_bf16(Trans::kNo, Trans::kNo, 8, 8, 8, 1.0f, p.A.data(), p.lda, p.B.data(),
                         p.ldb, 0.0f, c.data(), p.ldc, &ep),
               std::invalid_argument);
  EXPECT_THROW(gemm(Trans::kNo, Trans::kNo, 8, 8, 8, 1.0f, p.A.data(), p.lda, p.B.data(), p.ldb,
                    0.0f, c.data(), p.ldc, &ep),
               std::invalid_argument);
}

// The addend: C = alpha·op(A)·op(B) + beta·C + s·D is the plain product's C with s·D added in
// one fused multiply-add, bit for bit; elements outside M×N stay untouched.
void check_addend(const MicroKernel& kernel, bool bf16_gemm, Trans ta, Trans tb, uint32_t seed) {
  Problem p(ta, tb, 41, 67, 300, 0.75f, 0.5f, seed);
  const int64_t ld_d = p.N + 7;
  std::mt19937 rng(seed + 2000);
  const std::vector<float> d = random_matrix(static_cast<size_t>(p.M * ld_d), rng);
  GemmEpilogue ep;
  ep.addend = d.data();
  ep.ld_addend = ld_d;
  ep.addend_scale = -1.25f;
  std::vector<float> got = p.C0, plain = p.C0;
  run_with(kernel, bf16_gemm, p, got, &ep);
  run_with(kernel, bf16_gemm, p, plain, nullptr);
  for (int64_t i = 0; i < p.M; ++i) {
    for (int64_t j = 0; j < p.ldc; ++j) {
      const size_t idx = static_cast<size_t>(i * p.ldc + j);
      const float want =
          j < p.N ? std::fma(-1.25f, d[static_cast<size_t>(i * ld_d + j)], plain[idx]) : p.C0[idx];
      ASSERT_EQ(got[idx], want) << kernel.isa << " " << i << "," << j;
    }
  }
}

TEST(Gemm, AddendEpilogueOnEveryKernel) {
  uint32_t seed = 901;
  for (Trans ta : {Trans::kNo, Trans::kYes}) {
    for (Trans tb : {Trans::kNo, Trans::kYes}) {
      for (const MicroKernel& k : available_microkernels()) check_addend(k, false, ta, tb, seed++);
      for (const MicroKernel& k : bf16_microkernels_under_test())
        check_addend(k, true, ta, tb, seed++);
    }
  }
}

// The relu² backward epilogue: C = (2·√H)·(alpha·op(A)·op(B) + beta·C) where H > 0, else 0,
// exactly the product of the plain GEMM's C with the factor (so bit-for-bit checkable), and it
// happens before relu², which sees the result. H holds positive, zero and NaN entries (what
// relu² gives); elements outside M×N stay untouched.
void check_relu_squared_grad(const MicroKernel& kernel, bool bf16_gemm, Trans ta, Trans tb,
                             uint32_t seed) {
  Problem p(ta, tb, 37, 83, 66, 0.75f, 0.5f, seed);
  const int64_t ld_h = p.N + 9;
  std::mt19937 rng(seed + 1000);
  std::vector<float> h = random_matrix(static_cast<size_t>(p.M * ld_h), rng);
  for (float& v : h) v = v * v;
  for (size_t i = 0; i < h.size(); i += 17) h[i] = 0.0f;
  for (size_t i = 5; i < h.size(); i += 29) h[i] = std::numeric_limits<float>::quiet_NaN();
  GemmEpilogue grad_only, both;
  grad_only.relu_squared_output = h.data();
  grad_only.ld_relu_squared_output = ld_h;
  both = grad_only;
  both.relu_squared = true;
  std::vector<float> got = p.C0, squared = p.C0, plain = p.C0;
  run_with(kernel, bf16_gemm, p, got, &grad_only);
  run_with(kernel, bf16_gemm, p, squared, &both);
  run_with(kernel, bf16_gemm, p, plain, nullptr);
  for (int64_t i = 0; i < p.M; ++i) {
    for (int64_t j = 0; j < p.ldc; ++j) {
      const size_t idx = static_cast<size_t>(i * p.ldc + j);
      if (j >= p.N) {
        ASSERT_EQ(got[idx], p.C0[idx]) << kernel.isa << " wrote outside N at " << i << "," << j;
        continue;
      }
      const float hv = h[static_cast<size_t>(i * ld_h + j)];
      const float want = hv > 0.0f ? (2.0f * std::sqrt(hv)) * plain[idx] : 0.0f;
      ASSERT_EQ(got[idx], want) << kernel.isa << " " << i << "," << j << " h=" << hv;
      const float r = std::max(want, 0.0f);
      ASSERT_EQ(squared[idx], r * r) << kernel.isa << " " << i << "," << j;
    }
  }
  // H stored rounded to bf16: the bits of the same epilogue on an fp32 H holding those values.
  std::vector<bf16> h16(h.size());
  std::vector<float> h_widened(h.size());
  for (size_t i = 0; i < h.size(); ++i) {
    h16[i] = to_bf16(h[i]);
    h_widened[i] = to_float(h16[i]);
  }
  GemmEpilogue from_bf16, from_widened;
  from_bf16.relu_squared_output_bf16 = h16.data();
  from_widened.relu_squared_output = h_widened.data();
  from_bf16.ld_relu_squared_output = from_widened.ld_relu_squared_output = ld_h;
  std::vector<float> got16 = p.C0, want16 = p.C0;
  run_with(kernel, bf16_gemm, p, got16, &from_bf16);
  run_with(kernel, bf16_gemm, p, want16, &from_widened);
  ASSERT_TRUE(same_bits(got16, want16)) << kernel.isa << ": relu² output given in bf16";
  EXPECT_FALSE(same_bits(got16, got)) << kernel.isa << ": rounding H should change some values";
}

TEST(Gemm, ReluSquaredGradEpilogueOnEveryKernel) {
  uint32_t seed = 501;
  for (Trans ta : {Trans::kNo, Trans::kYes}) {
    for (Trans tb : {Trans::kNo, Trans::kYes}) {
      for (const MicroKernel& k : available_microkernels())
        check_relu_squared_grad(k, false, ta, tb, seed++);
      for (const MicroKernel& k : bf16_microkernels_under_test())
        check_relu_squared_grad(k, true, ta, tb, seed++);
    }
  }
}

// A C of 8 MiB or more with aligned rows and beta = 0 is written with non-temporal stores; the
// same product into rows that are not 64-byte aligned (ldc not a multiple of 16) is not. Both
// give the same bits, with and without an epilogue, on every kernel that can stream.
TEST(Gemm, StreamedLargeOutputsEqualCachedOnes) {
  constexpr int64_t M = 1024, N = 2048, K = 40;
  std::mt19937 rng(11);
  const std::vector<float> A = random_matrix(M * K, rng), B = random_matrix(K * N, rng);
  AlignedVector<float> streamed(M * N);  // rows on cache lines, as streaming needs
  std::vector<float> cached(M * (N + 1));
  for (const MicroKernel& kernel : bf16_microkernels_under_test()) {
    if (kernel.stream == nullptr) continue;
    for (bool relu : {false, true}) {
      GemmEpilogue ep;
      ep.relu_squared = relu;
      std::fill(streamed.begin(), streamed.end(), std::numeric_limits<float>::quiet_NaN());
      std::fill(cached.begin(), cached.end(), std::numeric_limits<float>::quiet_NaN());
      const bool bf16 = kernel.bf16_products;
      auto run = [&](float* c, int64_t ldc) {
        if (bf16) {
          gemm_bf16_with(kernel, Trans::kNo, Trans::kNo, M, N, K, 1.0f, A.data(), K, B.data(), N,
                         0.0f, c, ldc, &ep);
        } else {
          gemm_with(kernel, Trans::kNo, Trans::kNo, M, N, K, 1.0f, A.data(), K, B.data(), N, 0.0f,
                    c, ldc, &ep);
        }
      };
      run(streamed.data(), N);
      run(cached.data(), N + 1);
      for (int64_t i = 0; i < M; ++i) {
        ASSERT_EQ(std::memcmp(&streamed[i * N], &cached[i * (N + 1)], N * sizeof(float)), 0)
            << kernel.isa << (relu ? " relu²" : "") << " row " << i;
      }
    }
  }
}

TEST(Gemm, PublicEntryPointsUseTheActiveKernels) {
  Problem p(Trans::kNo, Trans::kYes, 40, 50, 60, 1.0f, 0.0f, 3);
  std::vector<float> x = p.start_c(), y = p.start_c();
  gemm(p.ta, p.tb, p.M, p.N, p.K, 1.0f, p.A.data(), p.lda, p.B.data(), p.ldb, 0.0f, x.data(),
       p.ldc);
  gemm_with(active_microkernel(), p.ta, p.tb, p.M, p.N, p.K, 1.0f, p.A.data(), p.lda, p.B.data(),
            p.ldb, 0.0f, y.data(), p.ldc);
  EXPECT_TRUE(same_bits(x, y));
  x = p.start_c();
  y = p.start_c();
  gemm_bf16(p.ta, p.tb, p.M, p.N, p.K, 1.0f, p.A.data(), p.lda, p.B.data(), p.ldb, 0.0f, x.data(),
            p.ldc);
  gemm_bf16_with(active_bf16_microkernel(), p.ta, p.tb, p.M, p.N, p.K, 1.0f, p.A.data(), p.lda,
                 p.B.data(), p.ldb, 0.0f, y.data(), p.ldc);
  EXPECT_TRUE(same_bits(x, y));
  std::vector<bf16> a16(p.A.size());
  std::transform(p.A.begin(), p.A.end(), a16.begin(), [](float v) { return to_bf16(v); });
  y = p.start_c();
  gemm_bf16(p.ta, p.tb, p.M, p.N, p.K, 1.0f, a16.data(), p.lda, p.B.data(), p.ldb, 0.0f, y.data(),
            p.ldc);
  EXPECT_TRUE(same_bits(x, y)) << "bf16 A, fp32 B";
  std::vector<bf16> b16(p.B.size());
  std::transform(p.B.begin(), p.B.end(), b16.begin(), [](float v) { return to_bf16(v); });
  y = p.start_c();
  gemm_bf16(p.ta, p.tb, p.M, p.N, p.K, 1.0f, p.A.data(), p.lda, b16.data(), p.ldb, 0.0f, y.data(),
            p.ldc);
  EXPECT_TRUE(same_bits(x, y)) << "fp32 A, bf16 B";
}

// Every entry of the kernel table this CPU can run is complete: what the driver calls is there,
// its blocking is in its own units, and it reads every source its kind must (fp32 kernels all
// three, bf16-product kernels fp32 rounded to bf16 and bf16).
TEST(GemmIsa, KernelTableEntriesAreComplete) {
  for (const MicroKernel& k : bf16_microkernels_under_test()) {
    SCOPED_TRACE(k.isa);
    EXPECT_GT(k.mr, 0);
    EXPECT_GT(k.nr, 0);
    EXPECT_NE(k.fn, nullptr);
    EXPECT_NE(k.finish, nullptr);
    EXPECT_NE(k.a_layout, nullptr);
    EXPECT_NE(k.b_layout, nullptr);
    EXPECT_TRUE(k.runnable == nullptr || k.runnable());
    EXPECT_EQ(k.blocking.mc % k.mr, 0);
    EXPECT_EQ(k.blocking.nc % k.nr, 0);
    EXPECT_EQ(k.blocking.kc % k.k_step, 0);
    EXPECT_EQ(k.packed_bytes, k.bf16_products ? 2 : 4);
    for (PackSource s : {PackSource::kF32, PackSource::kF32ToBf16, PackSource::kBf16}) {
      const bool must = !k.bf16_products || s != PackSource::kF32;
      const auto i = static_cast<size_t>(s);
      EXPECT_EQ(k.pack_a[i] != nullptr, must) << "pack_a source " << i;
      EXPECT_EQ(k.pack_b[i] != nullptr, must) << "pack_b source " << i;
    }
  }
}

TEST(GemmIsa, CapRulesAndErrors) {
  const std::vector<IsaLevel> have = available_isas();
  ASSERT_FALSE(have.empty());
  EXPECT_EQ(have.front(), IsaLevel::kScalar);
  EXPECT_EQ(parse_isa_cap(nullptr), have.back());
  EXPECT_EQ(parse_isa_cap(""), have.back());
  for (IsaLevel level : {IsaLevel::kScalar, IsaLevel::kAvx2, IsaLevel::kAvx512, IsaLevel::kAmx}) {
    const bool available = std::find(have.begin(), have.end(), level) != have.end();
    if (available) {
      EXPECT_EQ(parse_isa_cap(isa_name(level)), level);
      // fp32 never goes above avx512; bf16 uses the cap's own kernel.
      const MicroKernel f = fp32_microkernel_for(level);
      EXPECT_LE(static_cast<int>(f.level), static_cast<int>(std::min(level, IsaLevel::kAvx512)));
      const MicroKernel b = bf16_microkernel_for(level);
      if (level == IsaLevel::kAmx) {
        EXPECT_STREQ(b.isa, "amx");
      } else if (level == IsaLevel::kAvx512) {
        EXPECT_TRUE(std::string(b.isa) == "avx512_bf16" || std::string(b.isa) == "avx512") << b.isa;
      } else {
        EXPECT_STREQ(b.isa, f.isa);
      }
    } else {
      try {
        parse_isa_cap(isa_name(level));
        ADD_FAILURE() << "no error for unavailable " << isa_name(level);
      } catch (const InputError& e) {
        EXPECT_NE(std::string(e.what()).find(isa_name(level)), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find("available here"), std::string::npos) << e.what();
      }
    }
  }
  try {
    parse_isa_cap("avx9000");
    ADD_FAILURE() << "no error for an unknown ISA";
  } catch (const InputError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("avx9000"), std::string::npos) << m;
    EXPECT_NE(m.find("scalar, avx2, avx512, amx"), std::string::npos) << m;
  }
}

}  // namespace
}  // namespace nanogpt
