#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "kernels/bf16.hpp"
#include "optim/newton_schulz.hpp"
#include "runtime/error.hpp"
#include "runtime/safetensors.hpp"
#include "runtime/thread_pool.hpp"
#include "support/fixtures.hpp"

namespace nanogpt {
namespace {

// For RecordProperty: std::to_string's fixed notation would print small errors as 0.
std::string sci(double v) {
  char s[32];
  std::snprintf(s, sizeof s, "%.2e", v);
  return s;
}

std::vector<float> random_matrix(int64_t rows, int64_t cols, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, scale);
  std::vector<float> v(static_cast<size_t>(rows * cols));
  for (auto& x : v) x = normal(rng);
  return v;
}

// max |got − want| / max |want|: fp32 GEMMs that sum in different orders differ by a few ulps
// of the largest terms, so errors are judged relative to the matrix's scale, not per element.
double max_rel_error(const std::vector<float>& got, const std::vector<float>& want) {
  EXPECT_EQ(got.size(), want.size());
  double err = 0.0, scale = 0.0;
  for (size_t i = 0; i < want.size(); ++i) {
    err = std::max(err, std::abs(static_cast<double>(got[i]) - want[i]));
    scale = std::max(scale, std::abs(static_cast<double>(want[i])));
  }
  return err / scale;
}

// The Nesterov input of the golden Muon step, in the generator's fp32 arithmetic.
std::vector<float> nesterov_input(const std::vector<float>& g, const std::vector<float>& buf0,
                                  double momentum) {
  const float m = static_cast<float>(momentum), om = static_cast<float>(1.0 - momentum);
  std::vector<float> u(g.size());
  for (size_t i = 0; i < g.size(); ++i) u[i] = om * g[i] + m * (m * buf0[i] + om * g[i]);
  return u;
}

// The same iteration in double with plain loops: what fp32 approximates. With
// `bf16_operands`, each product's operands are first rounded to bf16 (through fp32, as the
// iterate is stored), the addends b·A and a·X are not: what the bf16 iteration computes.
std::vector<double> newton_schulz_f64(const std::vector<float>& G, int64_t rows, int64_t cols,
                                      int steps, bool bf16_operands = false) {
  auto op = [&](double v) {
    return bf16_operands ? static_cast<double>(round_to_bf16(static_cast<float>(v))) : v;
  };
  const bool tall = rows > cols;
  const int64_t r = tall ? cols : rows, c = tall ? rows : cols;  // W is r×c, r <= c
  std::vector<double> W(static_cast<size_t>(r * c));
  double ss = 0;
  for (float v : G) ss += static_cast<double>(v) * v;
  const double denom = std::sqrt(ss) + 1e-7;
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t j = 0; j < cols; ++j) {
      W[static_cast<size_t>(tall ? j * c + i : i * c + j)] = G[static_cast<size_t>(i * cols + j)];
    }
  }
  for (auto& v : W) v /= denom;
  const double a = 3.4445, b = -4.7750, cc = 2.0315;
  std::vector<double> A(static_cast<size_t>(r * r)), B(A.size()), next(W.size());
  auto at = [](std::vector<double>& m, int64_t ld, int64_t i, int64_t j) -> double& {
    return m[static_cast<size_t>(i * ld + j)];
  };
  for (int s = 0; s < steps; ++s) {
    for (int64_t i = 0; i < r; ++i) {
      for (int64_t j = 0; j < r; ++j) {
        double sum = 0;
        for (int64_t k = 0; k < c; ++k) sum += op(at(W, c, i, k)) * op(at(W, c, j, k));
        at(A, r, i, j) = sum;
      }
    }
    for (int64_t i = 0; i < r; ++i) {
      for (int64_t j = 0; j < r; ++j) {
        double sum = 0;
        for (int64_t k = 0; k < r; ++k) sum += op(at(A, r, i, k)) * op(at(A, r, k, j));
        at(B, r, i, j) = b * at(A, r, i, j) + cc * sum;
      }
    }
    for (int64_t i = 0; i < r; ++i) {
      for (int64_t j = 0; j < c; ++j) {
        double sum = 0;
        for (int64_t k = 0; k < r; ++k) sum += op(at(B, r, i, k)) * op(at(W, c, k, j));
        at(next, c, i, j) = a * at(W, c, i, j) + sum;
      }
    }
    W.swap(next);
  }
  std::vector<double> out(G.size());
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t j = 0; j < cols; ++j) {
      out[static_cast<size_t>(i * cols + j)] = W[static_cast<size_t>(tall ? j * c + i : i * c + j)];
    }
  }
  return out;
}

double max_rel_error(const std::vector<float>& got, const std::vector<double>& want) {
  double err = 0.0, scale = 0.0;
  for (size_t i = 0; i < want.size(); ++i) {
    err = std::max(err, std::abs(got[i] - want[i]));
    scale = std::max(scale, std::abs(want[i]));
  }
  return err / scale;
}

// Eigenvalues of a symmetric n×n matrix by cyclic Jacobi rotations (exact enough for tests,
// needs no LAPACK).
std::vector<double> symmetric_eigenvalues(std::vector<double> M, int64_t n) {
  auto at = [&](int64_t i, int64_t j) -> double& { return M[static_cast<size_t>(i * n + j)]; };
  for (int sweep = 0; sweep < 100; ++sweep) {
    double off = 0;
    for (int64_t i = 0; i < n; ++i) {
      for (int64_t j = i + 1; j < n; ++j) off += at(i, j) * at(i, j);
    }
    if (off < 1e-30) break;
    for (int64_t p = 0; p < n; ++p) {
      for (int64_t q = p + 1; q < n; ++q) {
        if (at(p, q) == 0.0) continue;
        const double theta = (at(q, q) - at(p, p)) / (2 * at(p, q));
        const double t =
            (theta >= 0 ? 1.0 : -1.0) / (std::abs(theta) + std::sqrt(theta * theta + 1));
        const double cs = 1 / std::sqrt(t * t + 1), sn = t * cs;
        for (int64_t k = 0; k < n; ++k) {  // rotate columns p, q
          const double kp = at(k, p), kq = at(k, q);
          at(k, p) = cs * kp - sn * kq;
          at(k, q) = sn * kp + cs * kq;
        }
        for (int64_t k = 0; k < n; ++k) {  // rotate rows p, q
          const double pk = at(p, k), qk = at(q, k);
          at(p, k) = cs * pk - sn * qk;
          at(q, k) = sn * pk + cs * qk;
        }
      }
    }
  }
  std::vector<double> eig(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) eig[static_cast<size_t>(i)] = at(i, i);
  std::sort(eig.begin(), eig.end());
  return eig;
}

// Singular values of a rows×cols matrix: square roots of the eigenvalues of its smaller Gram
// matrix.
std::vector<double> singular_values(const std::vector<float>& X, int64_t rows, int64_t cols) {
  const bool tall = rows > cols;
  const int64_t k = tall ? cols : rows, inner = tall ? rows : cols;
  auto x = [&](int64_t i, int64_t l) {  // element (i, l) of the k×inner orientation
    return static_cast<double>(X[static_cast<size_t>(tall ? l * cols + i : i * cols + l)]);
  };
  std::vector<double> gram(static_cast<size_t>(k * k));
  for (int64_t i = 0; i < k; ++i) {
    for (int64_t j = 0; j < k; ++j) {
      double sum = 0;
      for (int64_t l = 0; l < inner; ++l) sum += x(i, l) * x(j, l);
      gram[static_cast<size_t>(i * k + j)] = sum;
    }
  }
  std::vector<double> sv = symmetric_eigenvalues(gram, k);
  for (auto& v : sv) v = std::sqrt(std::max(v, 0.0));
  return sv;
}

const std::string kGolden = "tests/data/golden_optim.safetensors";
const std::vector<std::pair<int64_t, int64_t>> kGoldenShapes = {{24, 40}, {40, 24}, {32, 32}};

// fp32 results against fp32 torch: the GEMMs sum in different orders and the iteration
// amplifies small singular directions (slope a ≈ 3.4 per step), so agreement is a few 1e-6 of
// the output's scale, not ulps. Observed 1–3e-6 with every GEMM micro-kernel (torch's own error
// against float64 is 0.8–1.4e-6); an indexing or formula bug is O(1).
constexpr double kGoldenTolerance = 1e-5;

TEST(NewtonSchulz, MatchesGoldenOnEveryShape) {
  SafetensorsReader r(source_path(kGolden));
  const double momentum = r.read_f64("muon/momentum").at(0);
  for (auto [rows, cols] : kGoldenShapes) {
    const std::string c = "muon/" + std::to_string(rows) + "x" + std::to_string(cols) + "/";
    const auto u = nesterov_input(r.read_f32(c + "g", {rows, cols}),
                                  r.read_f32(c + "buf0", {rows, cols}), momentum);
    const auto want = r.read_f32(c + "ns", {rows, cols});
    std::vector<float> got(u.size());
    NewtonSchulzWorkspace ws;
    newton_schulz5(u.data(), rows, cols, 5, got.data(), ws);
    const double err = max_rel_error(got, want);
    const double err64 = max_rel_error(got, newton_schulz_f64(u, rows, cols, 5));
    const double golden64 = max_rel_error(want, newton_schulz_f64(u, rows, cols, 5));
    RecordProperty(c + "error_vs_golden", sci(err));
    RecordProperty(c + "error_vs_f64", sci(err64));
    EXPECT_LT(err, kGoldenTolerance) << c;
    // Our fp32 is as close to exact arithmetic as torch's is, within a small factor.
    EXPECT_LT(err64, std::max(4 * golden64, 2e-6)) << c;
  }
}

// The bf16 iteration (the products on bf16-rounded operands, fp32 accumulation, an fp32
// iterate) against the same in double, one step: fp32 and double put an operand on different
// sides of a bf16 rounding boundary only when it sits within an fp32 ulp of one, so one step
// agrees to fp32's ~1e-7 of the output's scale (observed ≤ 8.4e-8 on these shapes), while the
// iteration on unrounded operands is ~1e-4 away (observed ≥ 5.8e-5): a product whose operands
// were not rounded, or rounded differently, shows. Over more steps the rare flips grow by the
// quintic's slope (~1e-3 after two steps on 256×64), so five steps are checked by their effect:
// every singular value lands near one as in fp32.
TEST(NewtonSchulz, Bf16IsTheIterationOnBf16Operands) {
  uint32_t seed = 41;
  for (auto [rows, cols] : std::vector<std::pair<int64_t, int64_t>>{
           {24, 40}, {40, 24}, {64, 256}, {256, 64}, {200, 200}, {130, 300}}) {
    const auto G = random_matrix(rows, cols, seed++);
    const std::string c = std::to_string(rows) + "x" + std::to_string(cols);
    NewtonSchulzWorkspace ws;
    ws.precision = Precision::kBf16;
    std::vector<float> got(G.size());
    newton_schulz5(G.data(), rows, cols, 1, got.data(), ws);
    const double err = max_rel_error(got, newton_schulz_f64(G, rows, cols, 1, true));
    const double err_unrounded = max_rel_error(got, newton_schulz_f64(G, rows, cols, 1, false));
    RecordProperty(c + "_error_vs_bf16_operands", sci(err));
    RecordProperty(c + "_error_vs_fp32_operands", sci(err_unrounded));
    EXPECT_LT(err, 1e-6) << c;
    EXPECT_GT(err_unrounded, 2e-5) << c;
    if (rows == cols) continue;  // a square Gaussian may have a singular value near zero
    newton_schulz5(G.data(), rows, cols, 5, got.data(), ws);
    const auto sv = singular_values(got, rows, cols);
    EXPECT_GT(sv.front(), 0.6) << c;
    EXPECT_LT(sv.back(), 1.2) << c;
  }
}

TEST(NewtonSchulz, SingularValuesLandNearOne) {
  // Observed: every singular value in [0.682, 1.134]. Rectangular Gaussian matrices (aspect >= 2)
  // keep their smallest singular value well away from zero (Marchenko–Pastur), so five steps
  // suffice to lift all of them; a square random matrix can have one arbitrarily close to zero,
  // which no fixed step count lifts.
  const std::vector<std::pair<int64_t, int64_t>> shapes = {{16, 48},  {48, 16},  {24, 96}, {96, 24},
                                                           {40, 100}, {64, 256}, {200, 64}};
  uint32_t seed = 7;
  for (auto [rows, cols] : shapes) {
    for (float scale : {1e-4f, 1.0f, 300.0f}) {  // the normalization makes scale irrelevant
      const auto G = random_matrix(rows, cols, seed++, scale);
      std::vector<float> out(G.size());
      NewtonSchulzWorkspace ws;
      newton_schulz5(G.data(), rows, cols, 5, out.data(), ws);
      const auto sv = singular_values(out, rows, cols);
      EXPECT_GT(sv.front(), 0.6) << rows << "x" << cols << " scale " << scale;
      EXPECT_LT(sv.back(), 1.2) << rows << "x" << cols << " scale " << scale;
    }
  }
}

TEST(NewtonSchulz, TallIsTheTransposeOfWide) {
  const int64_t rows = 70, cols = 30;
  const auto G = random_matrix(rows, cols, 11);
  std::vector<float> Gt(G.size());
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t j = 0; j < cols; ++j) {
      Gt[static_cast<size_t>(j * rows + i)] = G[static_cast<size_t>(i * cols + j)];
    }
  }
  NewtonSchulzWorkspace ws;
  std::vector<float> out(G.size()), out_t(G.size()), back(G.size());
  newton_schulz5(G.data(), rows, cols, 5, out.data(), ws);
  newton_schulz5(Gt.data(), cols, rows, 5, out_t.data(), ws);
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t j = 0; j < cols; ++j) {
      back[static_cast<size_t>(i * cols + j)] = out_t[static_cast<size_t>(j * rows + i)];
    }
  }
  EXPECT_LT(max_rel_error(out, back), 1e-6);
}

TEST(NewtonSchulz, ZeroStepsOnlyNormalizes) {
  const auto G = random_matrix(9, 13, 3, 5.0f);
  std::vector<float> out(G.size());
  NewtonSchulzWorkspace ws;
  newton_schulz5(G.data(), 9, 13, 0, out.data(), ws);
  double ss = 0;
  for (float v : out) ss += static_cast<double>(v) * v;
  EXPECT_NEAR(std::sqrt(ss), 1.0, 1e-6);
}

TEST(NewtonSchulz, OutputMayAliasInput) {
  for (auto [rows, cols] : kGoldenShapes) {
    const auto G = random_matrix(rows, cols, 5);
    std::vector<float> separate(G.size()), in_place = G;
    NewtonSchulzWorkspace ws;
    newton_schulz5(G.data(), rows, cols, 5, separate.data(), ws);
    newton_schulz5(in_place.data(), rows, cols, 5, in_place.data(), ws);
    EXPECT_EQ(separate, in_place);
  }
}

TEST(NewtonSchulz, WorkspaceIsReusedWithoutChangingResults) {
  const auto big = random_matrix(50, 80, 21);
  const auto small = random_matrix(12, 7, 22);
  std::vector<float> fresh_big(big.size()), fresh_small(small.size());
  {
    NewtonSchulzWorkspace a, b;
    newton_schulz5(big.data(), 50, 80, 5, fresh_big.data(), a);
    newton_schulz5(small.data(), 12, 7, 5, fresh_small.data(), b);
  }
  NewtonSchulzWorkspace ws;
  std::vector<float> out_big(big.size()), out_small(small.size());
  newton_schulz5(big.data(), 50, 80, 5, out_big.data(), ws);
  const float* x = ws.x.data();
  const float* gram = ws.gram.data();
  newton_schulz5(small.data(), 12, 7, 5, out_small.data(), ws);  // stale, larger buffers
  newton_schulz5(big.data(), 50, 80, 5, out_big.data(), ws);
  EXPECT_EQ(out_big, fresh_big);
  EXPECT_EQ(out_small, fresh_small);
  // No reallocation once the buffers fit: a training step reuses them.
  EXPECT_EQ(ws.x.data(), x);
  EXPECT_EQ(ws.gram.data(), gram);
}

TEST(NewtonSchulz, BitwiseIdenticalAcrossThreadCounts) {
  // Big enough for several GEMM tiles and several element-wise chunks, both orientations; one
  // thread takes the symmetric products in blocks of 96 rows, two in blocks of 192 (k = 130:
  // two blocks against one; k = 300: four against two), in both precisions.
  for (auto [rows, cols] :
       std::vector<std::pair<int64_t, int64_t>>{{130, 600}, {600, 130}, {300, 700}}) {
    for (Precision precision : {Precision::kFp32, Precision::kBf16}) {
      const auto G = random_matrix(rows, cols, 31);
      std::vector<float> one(G.size()), two(G.size());
      NewtonSchulzWorkspace ws;
      ws.precision = precision;
      {
        ThreadPool pool(1);
        ThreadPool::Use use(pool);
        newton_schulz5(G.data(), rows, cols, 5, one.data(), ws);
      }
      {
        ThreadPool pool(2);
        ThreadPool::Use use(pool);
        newton_schulz5(G.data(), rows, cols, 5, two.data(), ws);
      }
      EXPECT_EQ(one, two) << rows << "x" << cols
                          << (precision == Precision::kBf16 ? " bf16" : " fp32");
    }
  }
}

TEST(NewtonSchulz, RejectsInvalidArguments) {
  std::vector<float> m(4, 1.0f), out(4);
  NewtonSchulzWorkspace ws;
  EXPECT_THROW(newton_schulz5(m.data(), 0, 4, 5, out.data(), ws), Error);
  EXPECT_THROW(newton_schulz5(m.data(), 2, -2, 5, out.data(), ws), Error);
  EXPECT_THROW(newton_schulz5(m.data(), 2, 2, -1, out.data(), ws), Error);
}

}  // namespace
}  // namespace nanogpt
