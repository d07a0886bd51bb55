#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "optim/adam.hpp"
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

std::vector<float> random_vector(int64_t n, uint32_t seed, float scale) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, scale);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = normal(rng);
  return v;
}

// max |got − want| / max |want|.
double max_rel_error(const std::vector<float>& got, const std::vector<float>& want) {
  EXPECT_EQ(got.size(), want.size());
  double err = 0.0, scale = 0.0;
  for (size_t i = 0; i < want.size(); ++i) {
    err = std::max(err, std::abs(static_cast<double>(got[i]) - want[i]));
    scale = std::max(scale, std::abs(static_cast<double>(want[i])));
  }
  return err / scale;
}

// The same ops as torch in the same order, so only FMA contraction (torch's vectorized add
// uses fmadd) can separate us: an ulp or two. 1e-6 relative is ~8 ulps at the largest value.
constexpr double kTorchTolerance = 1e-6;

TEST(Adam, MatchesTorchThreeSteps) {
  SafetensorsReader r(source_path("tests/data/golden_optim.safetensors"));
  AdamConfig config;
  const auto betas = r.read_f64("adam/betas", {2});
  config.beta1 = betas[0];
  config.beta2 = betas[1];
  config.eps = r.read_f64("adam/eps").at(0);
  const double lr = r.read_f64("adam/lr").at(0);
  ASSERT_EQ(config.beta1, AdamConfig{}.beta1);  // the golden uses the seed's defaults
  ASSERT_EQ(config.beta2, AdamConfig{}.beta2);
  ASSERT_EQ(config.eps, AdamConfig{}.eps);

  auto p = r.read_f32("adam/p0", {7, 5});
  const auto p0 = p;
  std::vector<float> exp_avg(p.size(), 0.0f), exp_avg_sq(p.size(), 0.0f);
  for (int64_t step = 1; step <= 3; ++step) {
    const auto g = r.read_f32("adam/g" + std::to_string(step), {7, 5});
    adam_update(p.data(), g.data(), exp_avg.data(), exp_avg_sq.data(), 35, lr, config, step);
    const auto want = r.read_f32("adam/p" + std::to_string(step), {7, 5});
    const double err = max_rel_error(p, want);
    RecordProperty("p" + std::to_string(step) + "_rel_error", sci(err));
    EXPECT_LE(err, kTorchTolerance) << "step " << step;
  }
  EXPECT_LE(max_rel_error(exp_avg, r.read_f32("adam/exp_avg3", {7, 5})), kTorchTolerance);
  EXPECT_LE(max_rel_error(exp_avg_sq, r.read_f32("adam/exp_avg_sq3", {7, 5})), kTorchTolerance);
  // The golden's g[0, 0] is always 0: moments stay 0 and eps keeps 0/0 from happening.
  EXPECT_EQ(p[0], p0[0]);
  EXPECT_EQ(exp_avg_sq[0], 0.0f);
}

TEST(Adam, FirstStepMovesEachElementByAboutLr) {
  // Bias correction makes step 1 an exact sign step: exp_avg/(1−β1) = g and
  // √(exp_avg_sq/(1−β2)) = |g|, so p moves by lr·g/(|g| + eps) ≈ lr·sign(g).
  const int64_t n = 1000;
  const auto g = random_vector(n, 1, 0.3f);
  auto p = random_vector(n, 2, 1.0f);
  const auto p0 = p;
  std::vector<float> m(n, 0.0f), v(n, 0.0f);
  adam_update(p.data(), g.data(), m.data(), v.data(), n, 0.01, AdamConfig{}, 1);
  for (int64_t i = 0; i < n; ++i) {
    const double moved = static_cast<double>(p[i]) - p0[i];
    EXPECT_NEAR(moved, g[i] > 0 ? -0.01 : 0.01, 1e-5 + 1e-6 * std::abs(p0[i])) << i;
  }
}

TEST(Adam, BitwiseIdenticalAcrossThreadCounts) {
  const int64_t n = 300000;  // several element-wise chunks
  const auto p0 = random_vector(n, 3, 1.0f);
  std::vector<std::vector<float>> grads;
  for (uint32_t s = 0; s < 3; ++s) grads.push_back(random_vector(n, 10 + s, 0.1f));
  auto run = [&](int threads) {
    ThreadPool pool(threads);
    ThreadPool::Use use(pool);
    auto p = p0;
    std::vector<float> m(n, 0.0f), v(n, 0.0f);
    for (int64_t step = 1; step <= 3; ++step) {
      adam_update(p.data(), grads[static_cast<size_t>(step - 1)].data(), m.data(), v.data(), n, 0.6,
                  AdamConfig{}, step);
    }
    p.insert(p.end(), m.begin(), m.end());
    p.insert(p.end(), v.begin(), v.end());
    return p;
  };
  EXPECT_EQ(run(1), run(2));
}

// adam_update runs the clone for this CPU's widest vectors (on AVX-512, 16 lanes with a masked
// or scalar tail); a plain loop of the same operations, one element at a time, must give its
// bits exactly: no clone may fuse a multiply into an add or reorder an operation.
TEST(Adam, VectorClonesGiveTheScalarLoopsBits) {
  const int64_t n = 3 * 65536 + 37;  // whole chunks, and a chunk whose vectors end ragged
  const AdamConfig config;
  const double lr = 0.02;
  auto p = random_vector(n, 5, 1.0f);
  auto want_p = p;
  std::vector<float> m(n, 0.0f), v(n, 0.0f), want_m(n, 0.0f), want_v(n, 0.0f);
  for (int64_t step = 1; step <= 3; ++step) {
    const auto g = random_vector(n, 20 + static_cast<uint32_t>(step), 0.1f);
    adam_update(p.data(), g.data(), m.data(), v.data(), n, lr, config, step);
    const double s = static_cast<double>(step);
    const float neg_step_size = static_cast<float>(-(lr / (1.0 - std::pow(config.beta1, s))));
    const float bc2_sqrt = static_cast<float>(std::sqrt(1.0 - std::pow(config.beta2, s)));
    const float b1 = static_cast<float>(config.beta1), b2 = static_cast<float>(config.beta2);
    const float c1 = static_cast<float>(1.0 - config.beta1);
    const float c2 = static_cast<float>(1.0 - config.beta2);
    const float eps = static_cast<float>(config.eps);
    for (size_t i = 0; i < want_p.size(); ++i) {
      // The tests are built for the baseline ISA, which has no FMA: each operation rounds.
      const float m1 = b1 * want_m[i];
      const float m2 = c1 * g[i];
      want_m[i] = m1 + m2;
      const float v1 = b2 * want_v[i];
      const float v2 = c2 * g[i];
      const float v3 = v2 * g[i];
      want_v[i] = v1 + v3;
      const float root = std::sqrt(want_v[i]);
      const float scaled = root / bc2_sqrt;
      const float denom = scaled + eps;
      const float num = neg_step_size * want_m[i];
      const float update = num / denom;
      want_p[i] = want_p[i] + update;
    }
  }
  EXPECT_EQ(p, want_p);
  EXPECT_EQ(m, want_m);
  EXPECT_EQ(v, want_v);
}

TEST(Adam, RejectsStepZero) {
  std::vector<float> p(4, 1.0f), g(4, 0.5f), m(4, 0.0f), v(4, 0.0f);
  EXPECT_THROW(adam_update(p.data(), g.data(), m.data(), v.data(), 4, 0.1, AdamConfig{}, 0), Error);
}

}  // namespace
}  // namespace nanogpt
