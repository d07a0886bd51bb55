// RMSNorm, RoPE and ReLU² against double-precision references on random inputs, with
// poisoned outputs. fp32 bounds: 1e-6 relative for the forwards (one rounding per element),
// 1e-5 for the RMSNorm backward (a dot product of `dim` terms).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include "kernels/axpby.hpp"
#include "kernels/dot.hpp"
#include "kernels/relu_squared.hpp"
#include "kernels/rmsnorm.hpp"
#include "kernels/rotary.hpp"

namespace nanogpt {
namespace {

std::vector<float> random_vector(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

constexpr float kPoison = std::numeric_limits<float>::quiet_NaN();

// The run-time-dispatched float dot product sums the same lanes as the portable template, so
// it gives the same bits; both are within double rounding of a plain sequential sum.
TEST(DotDouble, DispatchedCloneEqualsThePortableLanesAndTheReference) {
  for (int64_t n : {1, 7, 8, 9, 255, 256, 1031}) {
    const auto a = random_vector(static_cast<size_t>(n), 40 + static_cast<uint32_t>(n), 2.0f);
    const auto b = random_vector(static_cast<size_t>(n), 90 + static_cast<uint32_t>(n), 0.5f);
    const double got = dot_double(a.data(), b.data(), n);
    const double lanes = dot_double_lanes(a.data(), b.data(), n);
    EXPECT_EQ(std::memcmp(&got, &lanes, sizeof got), 0) << "n=" << n;
    double plain = 0, magnitude = 0;
    for (int64_t i = 0; i < n; ++i) {
      plain += double(a[i]) * b[i];
      magnitude += std::abs(double(a[i]) * b[i]);
    }
    EXPECT_NEAR(got, plain, 4e-16 * static_cast<double>(n) * magnitude) << "n=" << n;
  }
}

TEST(RmsNorm, ForwardMatchesDoubleReference) {
  for (int64_t dim : {1, 7, 32, 129}) {
    const int64_t rows = 5;
    auto x = random_vector(static_cast<size_t>(rows * dim), 1 + static_cast<uint32_t>(dim), 3.0f);
    std::vector<float> y(x.size(), kPoison), rstd(static_cast<size_t>(rows), kPoison);
    rmsnorm_forward(x.data(), dim, y.data(), dim, rstd.data(), rows, dim);
    for (int64_t r = 0; r < rows; ++r) {
      double ss = 0;
      for (int64_t i = 0; i < dim; ++i) ss += double(x[r * dim + i]) * x[r * dim + i];
      double s = 1.0 / std::sqrt(ss / dim + double(kRmsNormEps));
      for (int64_t i = 0; i < dim; ++i) {
        double want = x[r * dim + i] * s;
        ASSERT_NEAR(y[r * dim + i], want, 1e-6 * (1 + std::abs(want)));
      }
    }
  }
}

TEST(RmsNorm, BackwardMatchesFiniteDifferencesInDouble) {
  // The analytic gradient of L = Σ w·y against central differences of a double-precision
  // forward: the formula is checked independently of the fp32 code it drives.
  const int64_t dim = 24;
  auto x = random_vector(dim, 5, 2.0f), w = random_vector(dim, 6);
  auto forward = [&](const std::vector<double>& xs) {
    double ss = 0;
    for (double v : xs) ss += v * v;
    double s = 1.0 / std::sqrt(ss / dim + double(kRmsNormEps));
    double L = 0;
    for (int64_t i = 0; i < dim; ++i) L += w[i] * xs[i] * s;
    return L;
  };
  std::vector<float> y(dim), dx(dim, kPoison);
  float rstd;
  rmsnorm_forward(x.data(), dim, y.data(), dim, &rstd, 1, dim);
  rmsnorm_backward(y.data(), dim, &rstd, w.data(), dim, dx.data(), dim, 1, dim, false);
  std::vector<double> xd(x.begin(), x.end());
  for (int64_t i = 0; i < dim; ++i) {
    const double h = 1e-6;
    auto plus = xd, minus = xd;
    plus[i] += h;
    minus[i] -= h;
    double fd = (forward(plus) - forward(minus)) / (2 * h);
    EXPECT_NEAR(dx[i], fd, 1e-5 * (1 + std::abs(fd))) << i;
  }
  // accumulate adds instead of overwriting
  std::vector<float> acc(dim, 1.0f);
  rmsnorm_backward(y.data(), dim, &rstd, w.data(), dim, acc.data(), dim, 1, dim, true);
  for (int64_t i = 0; i < dim; ++i) EXPECT_NEAR(acc[i], 1.0f + dx[i], 1e-6);
}

TEST(Rotary, MatchesFormulaAndInverts) {
  const int64_t D = 16, H = 3, T = 300;
  RotaryTable rope(T, D);
  for (int64_t t : {0, 1, 77, 299}) {
    auto x = random_vector(static_cast<size_t>(H * D), static_cast<uint32_t>(t) + 10);
    auto y = x;
    rope.apply(y.data(), H, t);
    for (int64_t h = 0; h < H; ++h) {
      for (int64_t j = 0; j < D / 2; ++j) {
        double freq = j < D / 4 ? std::pow(1.0 / 1024.0, double(j) / (D / 4 - 1)) : 0.0;
        double c = std::cos(t * freq), s = std::sin(t * freq);
        double x1 = x[h * D + j], x2 = x[h * D + D / 2 + j];
        EXPECT_NEAR(y[h * D + j], x1 * c + x2 * s, 1e-6 * (1 + std::abs(x1) + std::abs(x2)));
        EXPECT_NEAR(y[h * D + D / 2 + j], -x1 * s + x2 * c,
                    1e-6 * (1 + std::abs(x1) + std::abs(x2)));
        if (j >= D / 4) {
          EXPECT_EQ(y[h * D + j], x[h * D + j]) << "zero frequencies leave dims unrotated";
        }
      }
    }
    rope.apply_inverse(y.data(), H, t);
    for (size_t i = 0; i < x.size(); ++i) EXPECT_NEAR(y[i], x[i], 1e-6 * (1 + std::abs(x[i])));
  }
}

// The float kernels run the clone for this CPU (AVX-512, AVX2 or the baseline); the portable
// loops they are built from, inlined here, are this file's baseline x86-64 code (no FMA to
// contract into). Equal bits show the clone in use evaluates each element as written: no fused
// a·b + c, no reassociation, the right tails. With contraction allowed in the clones' files,
// both tests fail on a CPU with FMA (add_scaled and weighted_sum among them; checked 2026-11-28).
bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

TEST(ElementwiseClones, AxpbyGivesThePortableLoopsBits) {
  for (int64_t n : {1, 15, 16, 17, 100, 256, 1031}) {
    const auto seed = static_cast<uint32_t>(n);
    const auto x = random_vector(static_cast<size_t>(n), 200 + seed, 3.0f);
    const auto y = random_vector(static_cast<size_t>(n), 300 + seed, 0.7f);
    const float a = 0.8317f, b = -1.3107f;
    std::vector<float> got(x.size(), kPoison), want(x.size(), kPoison);
    add_scaled(n, x.data(), a, y.data(), got.data());
    add_scaled_loop(n, x.data(), a, y.data(), want.data());
    EXPECT_TRUE(same_bits(got, want)) << "add_scaled n=" << n;
    weighted_sum(n, a, x.data(), b, y.data(), got.data());
    weighted_sum_loop(n, a, x.data(), b, y.data(), want.data());
    EXPECT_TRUE(same_bits(got, want)) << "weighted_sum n=" << n;
    weighted_sum(n, a, x.data(), b, nullptr, got.data());
    weighted_sum_loop(n, a, x.data(), b, static_cast<const float*>(nullptr), want.data());
    EXPECT_TRUE(same_bits(got, want)) << "weighted_sum without y n=" << n;
    scaled_copy(n, a, x.data(), got.data());
    scaled_copy_loop(n, a, x.data(), want.data());
    EXPECT_TRUE(same_bits(got, want)) << "scaled_copy n=" << n;
    // In place, as the model calls them (out aliasing x).
    got = x;
    want = x;
    add_scaled(n, got.data(), b, y.data(), got.data());
    add_scaled_loop(n, want.data(), b, y.data(), want.data());
    EXPECT_TRUE(same_bits(got, want)) << "add_scaled in place n=" << n;
    for (int64_t i = 0; i < n; ++i) {  // and the values are the expressions' (one rounding each)
      ASSERT_NEAR(got[i], double(x[i]) + double(b) * y[i], 1e-6 * (std::abs(x[i]) + 1)) << i;
    }
  }
}

TEST(ElementwiseClones, RmsNormAndRotaryGiveThePortableLoopsBits) {
  for (int64_t dim : {16, 64, 128, 129}) {
    const int64_t rows = 6;
    const auto seed = static_cast<uint32_t>(dim);
    const auto x = random_vector(static_cast<size_t>(rows * dim), 400 + seed, 2.0f);
    const auto dy = random_vector(x.size(), 500 + seed);
    std::vector<float> y(x.size(), kPoison), y_want(x.size(), kPoison);
    std::vector<float> rstd(static_cast<size_t>(rows), kPoison), rstd_want = rstd;
    rmsnorm_forward(x.data(), dim, y.data(), dim, rstd.data(), rows, dim);
    rmsnorm_forward_rows(x.data(), dim, y_want.data(), dim, rstd_want.data(), rows, dim);
    EXPECT_TRUE(same_bits(y, y_want) && same_bits(rstd, rstd_want)) << "forward dim=" << dim;
    for (const bool accumulate : {false, true}) {
      std::vector<float> dx = dy, dx_want = dy;  // accumulate adds to dy's values
      rmsnorm_backward(y.data(), dim, rstd.data(), dy.data(), dim, dx.data(), dim, rows, dim,
                       accumulate);
      rmsnorm_backward_rows(y.data(), dim, rstd.data(), dy.data(), dim, dx_want.data(), dim, rows,
                            dim, accumulate);
      EXPECT_TRUE(same_bits(dx, dx_want)) << "backward dim=" << dim << " acc=" << accumulate;
    }
    if (dim % 4 != 0) continue;
    const RotaryTable rope(64, dim);
    for (const int64_t t : {1, 37, 63}) {
      for (const float direction : {1.0f, -1.0f}) {
        std::vector<float> r = x, r_want = x;
        const float* c = rope.cos_row(t);
        const float* s = rope.sin_row(t);
        rotate_heads(r.data(), rows, dim, c, s, direction);
        rotate_heads_rows(r_want.data(), rows, dim, c, s, direction);
        EXPECT_TRUE(same_bits(r, r_want)) << "rotary dim=" << dim << " t=" << t;
      }
    }
  }
}

// The training path fuses relu² and its backward into GEMM epilogues (tests/test_gemm.cpp);
// this one is the decoder's.
TEST(ReluSquared, Forward) {
  auto x = random_vector(1001, 3);
  std::vector<float> y(x.size(), kPoison);
  relu_squared_forward(x.data(), y.data(), static_cast<int64_t>(x.size()));
  for (size_t i = 0; i < x.size(); ++i) {
    double r = std::max(0.0f, x[i]);
    EXPECT_FLOAT_EQ(y[i], static_cast<float>(r * r));
  }
}

}  // namespace
}  // namespace nanogpt
