// RMSNorm, RoPE and ReLU² against double-precision references on random inputs, with
// poisoned outputs. fp32 bounds: 1e-6 relative for the forwards (one rounding per element),
// 1e-5 for the RMSNorm backward (a dot product of `dim` terms).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>

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
