#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "optim/muon.hpp"
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

std::vector<float> random_matrix(int64_t rows, int64_t cols, uint32_t seed, float scale) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, scale);
  std::vector<float> v(static_cast<size_t>(rows * cols));
  for (auto& x : v) x = normal(rng);
  return v;
}

double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  double d = 0.0;
  for (size_t i = 0; i < a.size(); ++i) d = std::max(d, std::abs(static_cast<double>(a[i]) - b[i]));
  return d;
}

double max_abs(const std::vector<float>& a) {
  double m = 0.0;
  for (float v : a) m = std::max(m, std::abs(static_cast<double>(v)));
  return m;
}

const std::string kGolden = "tests/data/golden_optim.safetensors";

// Tolerances. The momentum buffer is element-wise fp32 arithmetic in the reference's order, so
// it should agree to the last bit; allow one ulp in case a compiler contracts to FMA. The
// parameter moves by lr·√aspect·ns, where ns (Newton–Schulz, see test_optim_newton_schulz.cpp)
// agrees with torch to ≤ 1e-5 of its scale, plus one rounding of p itself.
constexpr double kBufferTolerance = 1.2e-7;  // relative to max |buf|
constexpr double kNsTolerance = 1e-5;        // relative to max |ns|

// Checks one golden step: p_before, buf_before and g in; ns, p_after, buf_after expected.
void check_step(const SafetensorsReader& r, const std::string& prefix, std::vector<float>& p,
                std::vector<float>& buf, const std::string& g_name, const std::string& ns_name,
                const std::string& p_name, const std::string& buf_name, int64_t rows, int64_t cols,
                NewtonSchulzWorkspace& ws) {
  const double lr = r.read_f64("muon/lr").at(0);
  const double momentum = r.read_f64("muon/momentum").at(0);
  const auto g = r.read_f32(prefix + g_name, {rows, cols});
  const auto ns = r.read_f32(prefix + ns_name, {rows, cols});
  const auto p_want = r.read_f32(prefix + p_name, {rows, cols});
  const auto buf_want = r.read_f32(prefix + buf_name, {rows, cols});
  muon_update(p.data(), g.data(), buf.data(), rows, cols, lr, momentum, 5, ws);

  const double buf_err = max_abs_diff(buf, buf_want) / max_abs(buf_want);
  const double scale = lr * std::sqrt(std::max(1.0, static_cast<double>(rows) / cols));
  const double p_err = max_abs_diff(p, p_want);
  const double p_tol = scale * kNsTolerance * max_abs(ns) + 1.2e-7 * max_abs(p_want);
  testing::Test::RecordProperty(prefix + p_name + "_abs_error", sci(p_err));
  testing::Test::RecordProperty(prefix + buf_name + "_rel_error", sci(buf_err));
  EXPECT_LE(buf_err, kBufferTolerance) << prefix << buf_name;
  EXPECT_LE(p_err, p_tol) << prefix << p_name;
}

TEST(Muon, MatchesGoldenSingleStep) {
  SafetensorsReader r(source_path(kGolden));
  for (auto [rows, cols] : std::vector<std::pair<int64_t, int64_t>>{{24, 40}, {40, 24}, {32, 32}}) {
    const std::string c = "muon/" + std::to_string(rows) + "x" + std::to_string(cols) + "/";
    auto p = r.read_f32(c + "p0", {rows, cols});
    auto buf = r.read_f32(c + "buf0", {rows, cols});
    NewtonSchulzWorkspace ws;
    check_step(r, c, p, buf, "g", "ns", "p1", "buf1", rows, cols, ws);
  }
}

TEST(Muon, MatchesGoldenTwoConsecutiveSteps) {
  SafetensorsReader r(source_path(kGolden));
  const std::string c = "muon/two_step/";
  auto p = r.read_f32(c + "p0", {40, 24});
  auto buf = r.read_f32(c + "buf0", {40, 24});
  NewtonSchulzWorkspace ws;  // reused across steps, as in training
  check_step(r, c, p, buf, "g1", "ns1", "p1", "buf1", 40, 24, ws);
  check_step(r, c, p, buf, "g2", "ns2", "p2", "buf2", 40, 24, ws);
}

TEST(Muon, UpdateIsScaledOrthogonalizedNesterovGradient) {
  // The tall aspect (3:1) exercises the √(rows/cols) factor: the step must be exactly
  // −lr·√3·NS(u) with u formed as documented.
  const int64_t rows = 60, cols = 20;
  const double lr = 0.05, momentum = 0.93;
  const auto p0 = random_matrix(rows, cols, 1, 0.1f);
  const auto g = random_matrix(rows, cols, 2, 0.01f);
  const auto buf0 = random_matrix(rows, cols, 3, 0.01f);
  auto p = p0, buf = buf0;
  NewtonSchulzWorkspace ws;
  muon_update(p.data(), g.data(), buf.data(), rows, cols, lr, momentum, 5, ws);

  const float m = static_cast<float>(momentum), om = static_cast<float>(1.0 - momentum);
  std::vector<float> u(g.size()), ns(g.size());
  for (size_t i = 0; i < g.size(); ++i) {
    const float b = m * buf0[i] + om * g[i];
    EXPECT_EQ(buf[i], b) << i;
    u[i] = om * g[i] + m * b;
  }
  NewtonSchulzWorkspace ws2;
  newton_schulz5(u.data(), rows, cols, 5, ns.data(), ws2);
  const float step = static_cast<float>(lr * std::sqrt(3.0));
  for (size_t i = 0; i < p.size(); ++i) EXPECT_EQ(p[i], p0[i] - step * ns[i]) << i;
}

TEST(Muon, WithoutNesterovOrthogonalizesTheBuffer) {
  const int64_t rows = 16, cols = 36;
  const auto p0 = random_matrix(rows, cols, 4, 0.1f);
  const auto g = random_matrix(rows, cols, 5, 0.01f);
  const auto buf0 = random_matrix(rows, cols, 6, 0.01f);
  auto p = p0, buf = buf0;
  NewtonSchulzWorkspace ws;
  muon_update(p.data(), g.data(), buf.data(), rows, cols, 0.02, 0.9, 5, ws, /*nesterov=*/false);
  std::vector<float> ns(buf.size());
  NewtonSchulzWorkspace ws2;
  newton_schulz5(buf.data(), rows, cols, 5, ns.data(), ws2);
  for (size_t i = 0; i < p.size(); ++i) EXPECT_EQ(p[i], p0[i] - 0.02f * ns[i]) << i;
}

TEST(Muon, StackedWeightIsOneCallPerSlice) {
  // qkv_w [3, R, C]: each slice gets its own orthogonalization, so updating slice 1 alone
  // gives the same bits as updating it inside the stacked loop, and leaves slices 0, 2 alone.
  const int64_t R = 24, C = 32, slice = R * C;
  const auto p0 = random_matrix(3 * R, C, 7, 0.1f);
  const auto g = random_matrix(3 * R, C, 8, 0.01f);
  const auto buf0 = random_matrix(3 * R, C, 9, 0.01f);
  auto p = p0, buf = buf0;
  NewtonSchulzWorkspace ws;
  for (int64_t i = 0; i < 3; ++i) {
    muon_update(p.data() + i * slice, g.data() + i * slice, buf.data() + i * slice, R, C, 0.05,
                0.95, 5, ws);
  }
  std::vector<float> p1(p0.begin() + slice, p0.begin() + 2 * slice);
  std::vector<float> b1(buf0.begin() + slice, buf0.begin() + 2 * slice);
  std::vector<float> g1(g.begin() + slice, g.begin() + 2 * slice);
  NewtonSchulzWorkspace ws2;
  muon_update(p1.data(), g1.data(), b1.data(), R, C, 0.05, 0.95, 5, ws2);
  EXPECT_TRUE(std::equal(p1.begin(), p1.end(), p.begin() + slice));
  // The stacked matrix orthogonalized as a whole would differ: the slices are not coupled.
  auto whole = p0, whole_buf = buf0;
  muon_update(whole.data(), g.data(), whole_buf.data(), 3 * R, C, 0.05, 0.95, 5, ws2);
  EXPECT_GT(max_abs_diff(whole, p), 1e-3);
}

TEST(Muon, BitwiseIdenticalAcrossThreadCounts) {
  // Several GEMM tiles and several element-wise chunks, wide and tall.
  for (auto [rows, cols] : std::vector<std::pair<int64_t, int64_t>>{{130, 600}, {600, 130}}) {
    const auto p0 = random_matrix(rows, cols, 10, 0.1f);
    const auto g = random_matrix(rows, cols, 11, 0.01f);
    const auto buf0 = random_matrix(rows, cols, 12, 0.01f);
    auto p1 = p0, b1 = buf0, p2 = p0, b2 = buf0;
    NewtonSchulzWorkspace ws;
    {
      ThreadPool pool(1);
      ThreadPool::Use use(pool);
      muon_update(p1.data(), g.data(), b1.data(), rows, cols, 0.05, 0.95, 5, ws);
    }
    {
      ThreadPool pool(2);
      ThreadPool::Use use(pool);
      muon_update(p2.data(), g.data(), b2.data(), rows, cols, 0.05, 0.95, 5, ws);
    }
    EXPECT_EQ(p1, p2) << rows << "x" << cols;
    EXPECT_EQ(b1, b2) << rows << "x" << cols;
  }
}

TEST(Muon, RejectsInvalidArguments) {
  std::vector<float> p(6, 0.5f), g(6, 0.1f), buf(6, 0.2f);
  NewtonSchulzWorkspace ws;
  EXPECT_THROW(muon_update(p.data(), g.data(), buf.data(), 0, 6, 0.05, 0.9, 5, ws), Error);
  EXPECT_THROW(muon_update(p.data(), g.data(), buf.data(), 2, 3, 0.05, 1.5, 5, ws), Error);
  EXPECT_THROW(muon_update(p.data(), g.data(), buf.data(), 2, 3, 0.05, 0.9, -1, ws), Error);
}

}  // namespace
}  // namespace nanogpt
