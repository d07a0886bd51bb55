// Grouped GEMM: the three products of an expert MLP (rows grouped with B transposed or not,
// and the reduction grouped) on every fp32 and bf16 micro-kernel this CPU can run, against a
// loop of per-group reference GEMMs in double; group sizes 0, 1, not multiples of any mr/nr,
// one huge group among tiny ones; bitwise equal to a loop of per-group gemm() calls with the
// same kernel (epilogue included); bitwise identical for 1, 2, 3 threads; scratch kept in the
// workspace in scope; clear errors.
//
// Error bound, element by element, as test_gemm.cpp states it: the kernels sum the K products
// of a group in fp32, so |got − want| ≤ γ·(|alpha|·Σ_k|a_ik||b_kj| + |beta·C_ij|) with
// γ = (K + 2)·2⁻²⁴, K that group's reduction length; the tests allow 2γ. For bf16 the a and b
// are the operands rounded to bf16, as the reference rounds them (their products are exact).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "kernels/bf16.hpp"
#include "kernels/gemm.hpp"
#include "kernels/gemm/microkernel.hpp"
#include "kernels/gemm_bf16.hpp"
#include "kernels/grouped_gemm.hpp"
#include "runtime/error.hpp"
#include "runtime/thread_pool.hpp"
#include "runtime/workspace.hpp"
#include "support/kernels.hpp"
#include "support/reference.hpp"

namespace nanogpt {
namespace {

std::vector<float> random_matrix(size_t n, std::mt19937& rng) {
  // Non-zero values of both signs, spread over a few binades.
  std::uniform_real_distribution<float> u(0.25f, 2.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = (rng() & 1 ? 1.0f : -1.0f) * u(rng);
  return v;
}

std::vector<int64_t> offsets_of(const std::vector<int64_t>& sizes) {
  std::vector<int64_t> offsets = {0};
  for (int64_t s : sizes) offsets.push_back(offsets.back() + s);
  return offsets;
}

struct Sizes {
  const char* name;
  std::vector<int64_t> sizes;
};

// Sizes 0 and 1, sizes that are multiples of no kernel's mr or nr (6, 8, 12, 16, 32), one
// group far larger than the rest, no rows at all.
const std::vector<Sizes> kSizeSets = {
    {"mixed", {0, 1, 7, 0, 33, 130, 1, 0, 47}},
    {"skewed", {301, 1, 0, 2, 1, 1, 0, 3, 1, 1}},
    {"single", {77}},
    {"all_empty", {0, 0, 0}},
};

// A kernel and how its operands are read: fp32, or fp32 rounded to bf16.
struct Variant {
  MicroKernel kernel;
  PackSource source;
  std::string name() const {
    return std::string(kernel.isa) + (source == PackSource::kF32 ? "/fp32" : "/bf16");
  }
  bool bf16() const { return source == PackSource::kF32ToBf16; }
};

std::vector<Variant> variants() {
  std::vector<Variant> out;
  for (const MicroKernel& k : available_microkernels()) out.push_back({k, PackSource::kF32});
  for (const MicroKernel& k : bf16_microkernels_under_test()) {
    out.push_back({k, PackSource::kF32ToBf16});
  }
  return out;
}

std::vector<float> as_operand(const std::vector<float>& x, bool bf16, bool absolute) {
  std::vector<float> out(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const float v = bf16 ? round_to_bf16(x[i]) : x[i];
    out[i] = absolute ? std::abs(v) : v;
  }
  return out;
}

// Rows grouped: C_g = alpha·A_g·op(B_g) + beta·C_g. Leading dimensions wider than the rows,
// and two guard columns in C that must stay untouched.
struct RowsProblem {
  std::vector<int64_t> offsets;
  Trans tb;
  int64_t N, K;
  float alpha, beta;
  int64_t lda, ldb, ldc, stride_b;
  std::vector<float> A, B, C0;

  RowsProblem(const std::vector<int64_t>& sizes, Trans tb_, int64_t N_, int64_t K_, float alpha_,
              float beta_, uint32_t seed)
      : offsets(offsets_of(sizes)), tb(tb_), N(N_), K(K_), alpha(alpha_), beta(beta_) {
    std::mt19937 rng(seed);
    const int64_t rows = offsets.back(), groups = static_cast<int64_t>(sizes.size());
    lda = K + 3;
    ldb = (tb == Trans::kNo ? N : K) + 5;
    ldc = N + 2;
    stride_b = (tb == Trans::kNo ? K : N) * ldb + 4;
    A = random_matrix(static_cast<size_t>(rows * lda), rng);
    B = random_matrix(static_cast<size_t>(groups * stride_b), rng);
    C0 = random_matrix(static_cast<size_t>(rows * ldc), rng);
  }
  size_t groups() const { return offsets.size() - 1; }
  // beta = 0 must overwrite without reading: the inside of C starts as NaN.
  std::vector<float> start_c() const {
    std::vector<float> c = C0;
    if (beta == 0.0f) {
      for (int64_t i = 0; i < offsets.back(); ++i) {
        for (int64_t j = 0; j < N; ++j) c[i * ldc + j] = std::numeric_limits<float>::quiet_NaN();
      }
    }
    return c;
  }
  void run(const Variant& v, std::vector<float>& c, const GemmEpilogue* ep = nullptr) const {
    grouped_gemm_rows_with(v.kernel, v.source, offsets, tb, N, K, alpha, A.data(), lda, B.data(),
                           ldb, stride_b, beta, c.data(), ldc, ep);
  }
  // want: the reference per group; bound: 2γ(|alpha|·Σ|a||b| + |beta·C|).
  void reference(bool bf16, std::vector<float>& want, std::vector<float>& bound) const {
    want = C0;
    bound.assign(C0.size(), 0.0f);
    const std::vector<float> a = as_operand(A, bf16, false), b = as_operand(B, bf16, false);
    const std::vector<float> abs_a = as_operand(A, bf16, true), abs_b = as_operand(B, bf16, true);
    const double gamma = static_cast<double>(K + 2) * std::ldexp(1.0, -24);
    for (size_t g = 0; g < groups(); ++g) {
      const int64_t first = offsets[g], M = offsets[g + 1] - first;
      reference_gemm(Trans::kNo, tb, M, N, K, alpha, a.data() + first * lda, lda,
                     b.data() + g * stride_b, ldb, beta, want.data() + first * ldc, ldc);
      reference_gemm(Trans::kNo, tb, M, N, K, 1.0f, abs_a.data() + first * lda, lda,
                     abs_b.data() + g * stride_b, ldb, 0.0f, bound.data() + first * ldc, ldc);
    }
    for (int64_t i = 0; i < offsets.back(); ++i) {
      for (int64_t j = 0; j < N; ++j) {
        const size_t idx = static_cast<size_t>(i * ldc + j);
        const double c = beta == 0.0f ? 0.0 : std::abs(beta * C0[idx]);
        bound[idx] = static_cast<float>(2 * gamma * (std::abs(alpha) * bound[idx] + c) + 1e-30);
      }
    }
  }
};

// Reduction grouped: C_g = alpha·A_gᵀ·B_g + beta·C_g, C_g M × N at C + g·stride_c.
struct ReduceProblem {
  std::vector<int64_t> offsets;
  int64_t M, N;
  float alpha, beta;
  int64_t lda, ldb, ldc, stride_c;
  std::vector<float> A, B, C0;

  ReduceProblem(const std::vector<int64_t>& sizes, int64_t M_, int64_t N_, float alpha_,
                float beta_, uint32_t seed)
      : offsets(offsets_of(sizes)), M(M_), N(N_), alpha(alpha_), beta(beta_) {
    std::mt19937 rng(seed);
    const int64_t rows = offsets.back(), groups = static_cast<int64_t>(sizes.size());
    lda = M + 3;
    ldb = N + 5;
    ldc = N + 2;
    stride_c = M * ldc + 3;
    A = random_matrix(static_cast<size_t>(rows * lda), rng);
    B = random_matrix(static_cast<size_t>(rows * ldb), rng);
    C0 = random_matrix(static_cast<size_t>(groups * stride_c), rng);
  }
  size_t groups() const { return offsets.size() - 1; }
  float* c_of(std::vector<float>& c, size_t g) const { return c.data() + g * stride_c; }
  bool inside(size_t idx) const {
    const int64_t in_group = static_cast<int64_t>(idx) % stride_c;
    return in_group < M * ldc && in_group % ldc < N;
  }
  std::vector<float> start_c() const {
    std::vector<float> c = C0;
    if (beta == 0.0f) {
      for (size_t i = 0; i < c.size(); ++i) {
        if (inside(i)) c[i] = std::numeric_limits<float>::quiet_NaN();
      }
    }
    return c;
  }
  void run(const Variant& v, std::vector<float>& c) const {
    grouped_gemm_reduce_with(v.kernel, v.source, offsets, M, N, alpha, A.data(), lda, B.data(), ldb,
                             beta, c.data(), ldc, stride_c);
  }
  void reference(bool bf16, std::vector<float>& want, std::vector<float>& bound) const {
    want = C0;
    bound.assign(C0.size(), 0.0f);
    const std::vector<float> a = as_operand(A, bf16, false), b = as_operand(B, bf16, false);
    const std::vector<float> abs_a = as_operand(A, bf16, true), abs_b = as_operand(B, bf16, true);
    for (size_t g = 0; g < groups(); ++g) {
      const int64_t first = offsets[g], K = offsets[g + 1] - first;
      reference_gemm(Trans::kYes, Trans::kNo, M, N, K, alpha, a.data() + first * lda, lda,
                     b.data() + first * ldb, ldb, beta, c_of(want, g), ldc);
      std::vector<float> s(static_cast<size_t>(M * N), 0.0f);
      reference_gemm(Trans::kYes, Trans::kNo, M, N, K, 1.0f, abs_a.data() + first * lda, lda,
                     abs_b.data() + first * ldb, ldb, 0.0f, s.data(), N);
      const double gamma = static_cast<double>(K + 2) * std::ldexp(1.0, -24);
      for (int64_t i = 0; i < M; ++i) {
        for (int64_t j = 0; j < N; ++j) {
          const size_t idx = g * stride_c + static_cast<size_t>(i * ldc + j);
          const double c = beta == 0.0f ? 0.0 : std::abs(beta * C0[idx]);
          bound[idx] = static_cast<float>(
              2 * gamma * (std::abs(alpha) * s[static_cast<size_t>(i * N + j)] + c) + 1e-30);
        }
      }
    }
  }
};

// Inside C: within the bound; outside (guard columns, gaps between groups): untouched.
void expect_close(const std::vector<float>& got, const std::vector<float>& want,
                  const std::vector<float>& bound, const std::vector<float>& c0,
                  const std::vector<bool>& inside, const std::string& what) {
  for (size_t i = 0; i < got.size(); ++i) {
    if (!inside[i]) {
      ASSERT_EQ(got[i], c0[i]) << what << ": wrote outside C at " << i;
      continue;
    }
    ASSERT_TRUE(std::isfinite(got[i])) << what << " at " << i;
    ASSERT_NEAR(got[i], want[i], bound[i]) << what << " at " << i;
  }
}

std::vector<bool> inside_rows(const RowsProblem& p) {
  std::vector<bool> in(p.C0.size(), false);
  for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<int64_t>(i) % p.ldc < p.N;
  return in;
}

std::vector<bool> inside_reduce(const ReduceProblem& p) {
  std::vector<bool> in(p.C0.size(), false);
  for (size_t i = 0; i < in.size(); ++i) in[i] = p.inside(i);
  return in;
}

TEST(GroupedGemm, RowsMatchReferenceOnEveryKernel) {
  // Forward (B stored N × K, transposed) and input gradient (B as K × N), overwriting and
  // accumulating.
  for (const Variant& v : variants()) {
    uint32_t seed = 1;
    for (const Sizes& s : kSizeSets) {
      for (Trans tb : {Trans::kYes, Trans::kNo}) {
        for (auto [alpha, beta] : {std::pair{1.5f, 0.0f}, std::pair{-0.75f, 0.5f}}) {
          const RowsProblem p(s.sizes, tb, 45, 37, alpha, beta, seed++);
          std::vector<float> got = p.start_c(), want, bound;
          p.run(v, got);
          p.reference(v.bf16(), want, bound);
          expect_close(got, want, bound, p.C0, inside_rows(p),
                       v.name() + " rows " + s.name + (tb == Trans::kYes ? " NT" : " NN") +
                           " beta=" + std::to_string(beta));
        }
      }
    }
  }
}

TEST(GroupedGemm, ReduceMatchesReferenceOnEveryKernel) {
  // Weight gradient: accumulate (beta = 1, empty groups untouched), overwrite (beta = 0: an
  // empty group's C becomes 0 without being read), and scale (an empty group's C is halved).
  for (const Variant& v : variants()) {
    uint32_t seed = 100;
    for (const Sizes& s : kSizeSets) {
      for (auto [alpha, beta] :
           {std::pair{1.0f, 1.0f}, std::pair{1.25f, 0.0f}, std::pair{-0.5f, 0.5f}}) {
        const ReduceProblem p(s.sizes, 37, 45, alpha, beta, seed++);
        std::vector<float> got = p.start_c(), want, bound;
        p.run(v, got);
        p.reference(v.bf16(), want, bound);
        expect_close(got, want, bound, p.C0, inside_reduce(p),
                     v.name() + " reduce " + s.name + " beta=" + std::to_string(beta));
      }
    }
  }
}

// gemm() of one group alone, with the same kernel and operand reading.
void gemm_one(const Variant& v, Trans ta, Trans tb, int64_t M, int64_t N, int64_t K, float alpha,
              const float* A, int64_t lda, const float* B, int64_t ldb, float beta, float* C,
              int64_t ldc, const GemmEpilogue* ep) {
  if (v.bf16()) {
    gemm_bf16_with(v.kernel, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, ep);
  } else {
    gemm_with(v.kernel, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, ep);
  }
}

TEST(GroupedGemm, BitwiseEqualToPerGroupGemm) {
  // Each tile sums its reduction in the single GEMM's order, so a grouped call gives the bits
  // of a loop of gemm() calls, one per group.
  for (const Variant& v : variants()) {
    const Sizes& s = kSizeSets[0];
    for (Trans tb : {Trans::kYes, Trans::kNo}) {
      const RowsProblem p(s.sizes, tb, 45, 37, 1.0f, 0.5f, 7);
      std::vector<float> got = p.C0, want = p.C0;
      p.run(v, got);
      for (size_t g = 0; g < p.groups(); ++g) {
        const int64_t first = p.offsets[g];
        gemm_one(v, Trans::kNo, tb, p.offsets[g + 1] - first, p.N, p.K, p.alpha,
                 p.A.data() + first * p.lda, p.lda, p.B.data() + g * p.stride_b, p.ldb, p.beta,
                 want.data() + first * p.ldc, p.ldc, nullptr);
      }
      EXPECT_TRUE(same_bits(got, want)) << v.name() << " rows";
    }
    const ReduceProblem p(s.sizes, 37, 45, 1.0f, 0.5f, 8);
    std::vector<float> got = p.C0, want = p.C0;
    p.run(v, got);
    for (size_t g = 0; g < p.groups(); ++g) {
      const int64_t first = p.offsets[g];
      gemm_one(v, Trans::kYes, Trans::kNo, p.M, p.N, p.offsets[g + 1] - first, p.alpha,
               p.A.data() + first * p.lda, p.lda, p.B.data() + first * p.ldb, p.ldb, p.beta,
               p.c_of(want, g), p.ldc, nullptr);
    }
    EXPECT_TRUE(same_bits(got, want)) << v.name() << " reduce";
  }
}

TEST(GroupedGemm, EpilogueInStackedCoordinates) {
  // The epilogue's pointers address the stacked matrices: relu² and the bf16 copy on the
  // forward, relu²'s gradient (from the stacked H) on the input gradient; each must equal a
  // per-group gemm() given the group's rows of the same matrices.
  for (const Variant& v : variants()) {
    const Sizes& s = kSizeSets[0];
    const RowsProblem fwd(s.sizes, Trans::kYes, 45, 37, 1.0f, 0.0f, 11);
    const int64_t rows = fwd.offsets.back();
    std::vector<bf16> got16(static_cast<size_t>(rows * fwd.N)), want16(got16.size());
    GemmEpilogue ep;
    ep.relu_squared = true;
    ep.c_bf16 = got16.data();
    ep.ld_c_bf16 = fwd.N;
    std::vector<float> got = fwd.start_c(), want = fwd.start_c();
    fwd.run(v, got, &ep);
    for (size_t g = 0; g < fwd.groups(); ++g) {
      const int64_t first = fwd.offsets[g];
      GemmEpilogue one = ep;
      one.c_bf16 = want16.data() + first * fwd.N;
      gemm_one(v, Trans::kNo, Trans::kYes, fwd.offsets[g + 1] - first, fwd.N, fwd.K, fwd.alpha,
               fwd.A.data() + first * fwd.lda, fwd.lda, fwd.B.data() + g * fwd.stride_b, fwd.ldb,
               fwd.beta, want.data() + first * fwd.ldc, fwd.ldc, &one);
    }
    EXPECT_TRUE(same_bits(got, want)) << v.name() << " relu² forward";
    EXPECT_EQ(std::memcmp(got16.data(), want16.data(), got16.size() * sizeof(bf16)), 0)
        << v.name() << " bf16 copy";
    int64_t zeros = 0;
    for (int64_t i = 0; i < rows; ++i) {
      for (int64_t j = 0; j < fwd.N; ++j) zeros += got[i * fwd.ldc + j] == 0.0f ? 1 : 0;
    }
    EXPECT_GT(zeros, 0) << "relu² should zero the negative half";

    // H = the forward's relu² output (stacked, ld = fwd.ldc), some of it zero.
    const RowsProblem bwd(s.sizes, Trans::kNo, 45, 37, 1.0f, 0.0f, 12);
    GemmEpilogue grad;
    grad.relu_squared_output = got.data();
    grad.ld_relu_squared_output = fwd.ldc;
    std::vector<float> got_b = bwd.start_c(), want_b = bwd.start_c();
    bwd.run(v, got_b, &grad);
    for (size_t g = 0; g < bwd.groups(); ++g) {
      const int64_t first = bwd.offsets[g];
      GemmEpilogue one = grad;
      one.relu_squared_output = got.data() + first * fwd.ldc;
      gemm_one(v, Trans::kNo, Trans::kNo, bwd.offsets[g + 1] - first, bwd.N, bwd.K, bwd.alpha,
               bwd.A.data() + first * bwd.lda, bwd.lda, bwd.B.data() + g * bwd.stride_b, bwd.ldb,
               bwd.beta, want_b.data() + first * bwd.ldc, bwd.ldc, &one);
    }
    EXPECT_TRUE(same_bits(got_b, want_b)) << v.name() << " relu² gradient";
  }
}

TEST(GroupedGemm, BitwiseIdenticalForAnyThreadCount) {
  const Sizes& s = kSizeSets[1];  // skewed: many tiles in one group, a few elsewhere
  for (const Variant& v : variants()) {
    std::vector<std::vector<float>> results;
    for (int threads : {1, 2, 3}) {
      ThreadPool pool(threads);
      ThreadPool::Use use(pool);
      std::vector<float> all;
      for (Trans tb : {Trans::kYes, Trans::kNo}) {
        const RowsProblem p(s.sizes, tb, 300, 70, 1.0f, 0.0f, 21);
        std::vector<float> c = p.start_c();
        p.run(v, c);
        all.insert(all.end(), c.begin(), c.end());
      }
      const ReduceProblem p(s.sizes, 70, 300, 1.0f, 1.0f, 22);
      std::vector<float> c = p.C0;
      p.run(v, c);
      all.insert(all.end(), c.begin(), c.end());
      results.push_back(all);
    }
    EXPECT_TRUE(same_bits(results[0], results[1])) << v.name() << " 1 vs 2 threads";
    EXPECT_TRUE(same_bits(results[0], results[2])) << v.name() << " 1 vs 3 threads";
  }
}

TEST(GroupedGemm, KeepsItsScratchInTheWorkspaceInScope) {
  // The packed operands and the workers' accumulators come from the workspace in scope: counted
  // there (and not in the process default), the same buffers on a second call, freed by
  // release(), and the same bits from any workspace.
  ThreadPool three(3);
  ThreadPool::Use use_pool(three);
  const Sizes& s = kSizeSets[1];
  for (const Variant& v : variants()) {
    SCOPED_TRACE(v.name());
    // K = 600 takes several K blocks, so the accumulators are whole task blocks.
    const RowsProblem rows(s.sizes, Trans::kYes, 300, 600, 1.0f, 0.0f, 41);
    const ReduceProblem reduce(s.sizes, 70, 300, 1.0f, 1.0f, 42);
    auto run_both = [&] {
      std::vector<float> c = rows.start_c(), r = reduce.C0;
      rows.run(v, c);
      reduce.run(v, r);
      c.insert(c.end(), r.begin(), r.end());
      return c;
    };
    const std::vector<float> in_default = run_both();
    const size_t default_bytes = Workspace::process_default().bytes_held();
    Workspace ws("grouped gemm test");
    std::vector<float> first, again, after_release;
    {
      Workspace::Use use(ws);
      first = run_both();
      const size_t held = ws.bytes_held();
      // At least the rows call's packed A (every row, K deep) and packed B (N × K per group
      // with rows).
      int64_t groups_with_rows = 0;
      for (int64_t size : s.sizes) groups_with_rows += size > 0 ? 1 : 0;
      EXPECT_GE(held, static_cast<size_t>((rows.offsets.back() + groups_with_rows * rows.N) *
                                          rows.K * v.kernel.packed_bytes));
      again = run_both();
      EXPECT_EQ(ws.bytes_held(), held);
      EXPECT_EQ(ws.peak_bytes(), held);
      ws.release();
      EXPECT_EQ(ws.bytes_held(), 0u);
      after_release = run_both();
      EXPECT_EQ(ws.bytes_held(), held);
    }
    EXPECT_EQ(Workspace::process_default().bytes_held(), default_bytes);
    EXPECT_TRUE(same_bits(first, in_default));
    EXPECT_TRUE(same_bits(again, in_default));
    EXPECT_TRUE(same_bits(after_release, in_default));
  }
}

TEST(GroupedGemm, PrecisionEntriesUseTheActiveKernels) {
  const RowsProblem p(kSizeSets[0].sizes, Trans::kYes, 45, 37, 1.0f, 0.0f, 31);
  for (Precision precision : {Precision::kFp32, Precision::kBf16}) {
    const bool bf16 = precision == Precision::kBf16;
    const Variant v{bf16 ? active_bf16_microkernel() : active_microkernel(),
                    bf16 ? PackSource::kF32ToBf16 : PackSource::kF32};
    std::vector<float> got = p.start_c(), want = p.start_c();
    grouped_gemm_rows(precision, p.offsets, p.tb, p.N, p.K, p.alpha, p.A.data(), p.lda, p.B.data(),
                      p.ldb, p.stride_b, p.beta, got.data(), p.ldc);
    p.run(v, want);
    EXPECT_TRUE(same_bits(got, want)) << v.name();

    const ReduceProblem r(kSizeSets[0].sizes, 37, 45, 1.0f, 1.0f, 32);
    std::vector<float> got_r = r.C0, want_r = r.C0;
    grouped_gemm_reduce(precision, r.offsets, r.M, r.N, r.alpha, r.A.data(), r.lda, r.B.data(),
                        r.ldb, r.beta, got_r.data(), r.ldc, r.stride_c);
    r.run(v, want_r);
    EXPECT_TRUE(same_bits(got_r, want_r)) << v.name();
  }
}

// The message must name the problem.
template <class Fn>
void expect_input_error(const Fn& fn, const std::string& needle) {
  try {
    fn();
    ADD_FAILURE() << "no InputError; expected one mentioning " << needle;
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(GroupedGemm, BadInputIsAnInputError) {
  const int64_t N = 8, K = 4;
  std::vector<float> A(64 * K, 1.0f), B(4 * N * K, 1.0f), C(64 * N, 0.0f);
  auto rows = [&](std::vector<int64_t> offsets, int64_t lda, int64_t ldb, int64_t stride_b,
                  int64_t ldc) {
    grouped_gemm_rows(Precision::kFp32, offsets, Trans::kYes, N, K, 1.0f, A.data(), lda, B.data(),
                      ldb, stride_b, 0.0f, C.data(), ldc);
  };
  expect_input_error([&] { rows({0, 5, 3, 9}, K, K, N * K, N); }, "offsets[2] = 3 is less than");
  expect_input_error([&] { rows({2, 5, 9}, K, K, N * K, N); }, "offsets[0] is 2");
  expect_input_error([&] { rows({}, K, K, N * K, N); }, "offsets must hold groups + 1");
  expect_input_error([&] { rows({0, 5, 9}, K - 1, K, N * K, N); }, "lda = 3");
  expect_input_error([&] { rows({0, 5, 9}, K, K - 1, N * K, N); }, "ldb = 3");
  expect_input_error([&] { rows({0, 5, 9}, K, K, N * K - 1, N); }, "stride_b = 31");
  expect_input_error([&] { rows({0, 5, 9}, K, K, N * K, N - 1); }, "ldc = 7");
  expect_input_error(
      [&] {
        grouped_gemm_reduce(Precision::kFp32, std::vector<int64_t>{0, 5, 9}, N, K, 1.0f, A.data(),
                            N, B.data(), K, 1.0f, C.data(), K, N * K - 2);
      },
      "stride_c = 30");
  expect_input_error(
      [&] {
        grouped_gemm_reduce(Precision::kFp32, std::vector<int64_t>{0, 5, 4}, N, K, 1.0f, A.data(),
                            N, B.data(), K, 1.0f, C.data(), K, N * K);
      },
      "is less than offsets[1]");
  // No groups at all is a valid, empty call.
  EXPECT_NO_THROW(rows({0}, K, K, N * K, N));
}

}  // namespace
}  // namespace nanogpt
