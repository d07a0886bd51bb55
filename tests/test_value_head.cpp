// PPO's value head (posttrain/value_head.hpp): its forward and backward against a float64
// reference on random rows, its start at zero, its Adam step against torch's formula by hand, and
// its file (a round trip to the same bytes; other heads and other files refused).
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "posttrain/value_head.hpp"
#include "runtime/error.hpp"
#include "runtime/file_io.hpp"
#include "runtime/random.hpp"
#include "runtime/safetensors.hpp"
#include "support/fixtures.hpp"
#include "support/input_error.hpp"

namespace nanogpt {
namespace {

constexpr int64_t kDim = 24;

std::vector<float> random_floats(size_t n, uint64_t seed, double scale) {
  Rng rng(seed);
  std::vector<float> v(n);
  for (float& x : v) x = static_cast<float>(scale * (2 * rng.uniform() - 1));
  return v;
}

ValueHead random_head(uint64_t seed) {
  ValueHead head(kDim);
  const std::vector<float> w = random_floats(kDim + 1, seed, 0.3);
  std::copy(w.begin(), w.end() - 1, head.weight().begin());
  head.set_bias(w.back());
  return head;
}

// The float64 reference: each row's value, the gradients of Σ_r g_r·V_r and the rows' gradients,
// summed in the plainest order.
TEST(ValueHead, ForwardAndBackwardMatchAFloat64Reference) {
  const size_t rows = 37;
  ValueHead head = random_head(3);
  const std::vector<float> h = random_floats(rows * kDim, 4, 2.0);
  const std::vector<float> g32 = random_floats(rows, 5, 1.0);
  const double scale = 0.5;

  const std::vector<double> v = head.values(h);
  ASSERT_EQ(v.size(), rows);
  std::vector<double> ref_dw(kDim, 0.0);
  double ref_db = 0;
  for (size_t r = 0; r < rows; ++r) {
    long double ref = head.bias();
    for (int64_t i = 0; i < kDim; ++i) {
      ref += static_cast<long double>(h[r * kDim + i]) * head.weight()[i];
    }
    EXPECT_NEAR(v[r], static_cast<double>(ref), 1e-13) << "row " << r;
    EXPECT_EQ(head.value(h.data() + r * kDim), v[r]);
    const double g = g32[r];
    for (int64_t i = 0; i < kDim; ++i) ref_dw[i] += g * h[r * kDim + i];
    ref_db += g;
  }

  head.zero_grads();
  std::vector<float> dh(kDim);
  for (size_t r = 0; r < rows; ++r) {
    head.accumulate(h.data() + r * kDim, g32[r]);
    head.feature_grad(g32[r], scale, dh.data());
    for (int64_t i = 0; i < kDim; ++i) {
      const double ref = scale * g32[r] * head.weight()[i];
      EXPECT_NEAR(dh[i], ref, 1e-7 * std::abs(ref) + 1e-12) << "row " << r << " entry " << i;
    }
  }
  ASSERT_EQ(head.grads().size(), static_cast<size_t>(kDim + 1));
  for (int64_t i = 0; i < kDim; ++i) EXPECT_NEAR(head.grads()[i], ref_dw[i], 1e-12) << i;
  EXPECT_NEAR(head.grads()[kDim], ref_db, 1e-12);
  head.zero_grads();
  for (double x : head.grads()) EXPECT_EQ(x, 0.0);
}

// A new head's values are 0 and it sends no gradient into the trunk, yet it learns: its own
// gradient is not 0, and one Adam step moves it.
TEST(ValueHead, StartsAtZeroAndSendsNoGradientUntilItHasLearned) {
  ValueHead head(kDim);
  const std::vector<float> h = random_floats(3 * kDim, 7, 1.0);
  for (double v : head.values(h)) EXPECT_EQ(v, 0.0);
  std::vector<float> dh(kDim, 1.0f);
  head.feature_grad(-0.7, 0.5, dh.data());
  head.accumulate(h.data(), -0.7);
  for (float x : dh) EXPECT_EQ(x, 0.0f);
  EXPECT_NE(head.grads()[0], 0.0);
  head.adam_step(1e-3);
  EXPECT_EQ(head.adam_steps(), 1);
  EXPECT_GT(head.value(h.data()), 0.0);  // dL/dV < 0: V rises towards the return
  head.feature_grad(-0.7, 0.5, dh.data());
  EXPECT_NE(dh[0], 0.0f);
}

// Two Adam steps against torch.optim.Adam's update written out by hand (β 0.9, 0.999, ε 1e-8):
//   m = β1·m + (1−β1)·g,  v = β2·v + (1−β2)·g²,  p −= lr/(1−β1^t) · m / (√v/√(1−β2^t) + ε)
TEST(ValueHead, AdamStepMatchesTorchsFormulaByHand) {
  ValueHead head = random_head(8);
  const std::vector<float> h = random_floats(kDim, 9, 1.0);
  std::vector<double> p(kDim + 1), m(kDim + 1, 0.0), v(kDim + 1, 0.0);
  for (int64_t i = 0; i < kDim; ++i) p[i] = head.weight()[i];
  p[kDim] = head.bias();
  const double lr = 2e-3, b1 = 0.9, b2 = 0.999, eps = 1e-8;
  const double grad_values[] = {0.8, -0.3};
  for (int t = 1; t <= 2; ++t) {
    head.zero_grads();
    head.accumulate(h.data(), grad_values[t - 1]);
    for (int64_t i = 0; i <= kDim; ++i) {
      const double g = static_cast<float>(head.grads()[i]);
      m[i] = b1 * m[i] + (1 - b1) * g;
      v[i] = b2 * v[i] + (1 - b2) * g * g;
      p[i] -= lr / (1 - std::pow(b1, t)) * m[i] /
              (std::sqrt(v[i]) / std::sqrt(1 - std::pow(b2, t)) + eps);
    }
    head.adam_step(lr);
    for (int64_t i = 0; i < kDim; ++i) {
      EXPECT_NEAR(head.weight()[i], p[i], 1e-6 * lr + 1e-7 * std::abs(p[i]))
          << "step " << t << " w" << i;
    }
    EXPECT_NEAR(head.bias(), p[kDim], 1e-6 * lr + 1e-7 * std::abs(p[kDim])) << "step " << t;
  }
  EXPECT_EQ(head.adam_steps(), 2);
  EXPECT_NE(input_error([&] { head.adam_step(0.0); }), "");
  EXPECT_NE(input_error([&] { head.adam_step(std::nan("")); }), "");
  EXPECT_EQ(head.adam_steps(), 2);
}

// Saved and loaded: the same parameters, moments and step count, so the file reads back to the
// same bytes and the next step is the same bits; a head of another width and a file that is not a
// head are refused, naming the file.
TEST(ValueHead, SavedAndLoadedItContinuesBitwise) {
  TempDir dir;
  ValueHead head = random_head(10);
  const std::vector<float> h = random_floats(kDim, 11, 1.0);
  for (int t = 0; t < 3; ++t) {
    head.zero_grads();
    head.accumulate(h.data(), 0.4 - 0.3 * t);
    head.adam_step(1e-3);
  }
  const std::string path = dir.path() + "/" + ValueHead::kFileName;
  write_file_atomic(path, head.serialize());
  ValueHead loaded = ValueHead::load(path, kDim);
  EXPECT_EQ(loaded.serialize(), head.serialize());
  EXPECT_EQ(loaded.adam_steps(), 3);
  for (ValueHead* x : {&head, &loaded}) {
    x->zero_grads();
    x->accumulate(h.data(), -0.2);
    x->adam_step(1e-3);
  }
  EXPECT_EQ(loaded.serialize(), head.serialize());
  EXPECT_EQ(loaded.value(h.data()), head.value(h.data()));

  const std::string wrong = input_error([&] { ValueHead::load(path, kDim + 1); });
  EXPECT_NE(wrong.find(path), std::string::npos) << wrong;
  EXPECT_NE(wrong.find("25"), std::string::npos) << wrong;
  SafetensorsWriter other;
  other.add_f32("weight", {kDim}, std::vector<float>(kDim, 0.0f));
  const std::string other_path = dir.path() + "/other.safetensors";
  other.write(other_path);
  const std::string not_head = input_error([&] { ValueHead::load(other_path, kDim); });
  EXPECT_NE(not_head.find("value_head"), std::string::npos) << not_head;
}

}  // namespace
}  // namespace nanogpt
