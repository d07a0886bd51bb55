
#include "kernels/exp_approx.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <vector>

#include "kernels/exp_approx_avx512.hpp"
#include "runtime/cpu_info.hpp"
#include "support/float_bits.hpp"
#include "support/fused_multiply_add.hpp"

NANOGPT_ALLOW_AVX512_INTRINSICS

namespace nanogpt {
namespace {

using test::bits_of;
using test::from_bits;

// The kernels call exp_approx from loops compiled once per ISA (with FMA contraction where the
// ISA has FMA): evaluate it the same way, and also in plain code.
__attribute__((target_clones("avx512f", "arch=haswell", "default"))) void exp_row(const float* x,
                                                                                  float* y,
                                                                                  int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = exp_approx(x[i]);
}

NANOGPT_TARGET_AVX512 void exp_rows_avx512(const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; i += 16)
    _mm512_storeu_ps(y + i, exp_approx_avx512(_mm512_loadu_ps(x + i)));
}

// |got − e^x| in units of the last place of e^x rounded to float, with e^x in double.
double ulp_error(float got, float x) {
  const double want = std::exp(static_cast<double>(x));
  const float w = static_cast<float>(want);
  const double ulp =
      static_cast<double>(std::nextafter(w, std::numeric_limits<float>::infinity())) -
      static_cast<double>(w);
  return std::abs(static_cast<double>(got) - want) / ulp;
}

TEST(ExpApprox, WithinTwoUlpOnItsRange) {
  // Every 509th float of [-87, 88] (an odd stride, so it walks through all low-bit patterns),
  // the 4096 floats at each end and below ±0.5 (around n = ±1). Error against e^x in double,
  // in ulp of e^x rounded to float; Cephes states ~1 ulp. Seen 0.99. Bound: 2.
  std::vector<float> xs;
  const uint32_t hi_pos = bits_of(88.0f), hi_neg = bits_of(-87.0f);
  for (uint32_t u = 0; u <= hi_pos; u += 509) xs.push_back(from_bits(u));
  for (uint32_t u = 0x80000000u; u <= hi_neg; u += 509) xs.push_back(from_bits(u));
  for (uint32_t k = 0; k < 4096; ++k) {
    xs.push_back(from_bits(hi_pos - k));
    xs.push_back(from_bits(hi_neg - k));
    xs.push_back(from_bits(bits_of(0.5f) - k));
    xs.push_back(from_bits(bits_of(-0.5f) - k));
  }
  std::vector<float> ys(xs.size());
  exp_row(xs.data(), ys.data(), static_cast<int64_t>(xs.size()));
  double worst_row = 0, worst_plain = 0;
  float worst_x = 0;
  for (size_t i = 0; i < xs.size(); ++i) {
    const double e_row = ulp_error(ys[i], xs[i]);
    const double e_plain = ulp_error(exp_approx(xs[i]), xs[i]);
    if (e_row > worst_row) worst_x = xs[i];
    worst_row = std::max(worst_row, e_row);
    worst_plain = std::max(worst_plain, e_plain);
  }
  EXPECT_LE(worst_row, 2.0) << "at x = " << worst_x;
  EXPECT_LE(worst_plain, 2.0);
  std::printf(
      "exp_approx over %zu inputs: worst %.3g ulp (ISA loop, at x = %.9g), %.3g ulp (plain)\n",
      xs.size(), worst_row, worst_x, worst_plain);
}

// The AVX-512 form against the loop's AVX-512 clone on the range's sample, its edges and the
// special values: bit for bit where the build fuses multiply-adds (-O2 and above: the clone's
// are then fused as the form spells them), so the kernels that use it keep the bits they had;
// elsewhere (the sanitizer build, -O1) the clone fuses nothing and both are held to 2 ulp.
TEST(ExpApprox, Avx512FormMatchesTheClonedLoopBitForBit) {
  if (!cpu_info().avx512f) GTEST_SKIP() << "no AVX-512F";
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> xs = {0.0f,
                           -0.0f,
                           88.0f,
                           -87.0f,
                           inf,
                           -inf,
                           std::nextafter(88.0f, inf),
                           std::nextafter(-87.0f, -inf),
                           std::numeric_limits<float>::quiet_NaN(),
                           1e30f,
                           -1e30f};
  for (uint32_t u = 0; u <= bits_of(100.0f); u += 997) {
    xs.push_back(from_bits(u));
    xs.push_back(-from_bits(u));
  }
  while (xs.size() % 16 != 0) xs.push_back(1.0f);
  std::vector<float> want(xs.size()), got(xs.size());
  exp_row(xs.data(), want.data(), static_cast<int64_t>(xs.size()));
  exp_rows_avx512(xs.data(), got.data(), static_cast<int64_t>(xs.size()));
  for (size_t i = 0; i < xs.size(); ++i) {
    if (std::isnan(want[i])) {
      EXPECT_TRUE(std::isnan(got[i])) << "x = " << xs[i];
      continue;
    }
    if (test::build_fuses_multiply_add()) {
      ASSERT_EQ(bits_of(got[i]), bits_of(want[i])) << "x = " << xs[i];
    } else if (xs[i] >= -87.0f && xs[i] <= 88.0f) {
      ASSERT_LE(ulp_error(got[i], xs[i]), 2.0) << "x = " << xs[i];
    } else {
      ASSERT_EQ(bits_of(got[i]), bits_of(want[i])) << "x = " << xs[i];  // the edges' constants
    }
  }
}

TEST(ExpApprox, Edges) {
  const float inf = std::numeric_limits<float>::infinity();
  // Below -87: exactly 0, down to -inf (masked scores).
  for (float x : {std::nextafter(-87.0f, -inf), -87.5f, -100.0f, -1e30f, -inf}) {
    EXPECT_EQ(bits_of(exp_approx(x)), 0u) << x;
  }
  // -87 itself is in range: e^-87 ≈ 1.65e-38, a normal float.
  EXPECT_LE(ulp_error(exp_approx(-87.0f), -87.0f), 2.0);
  EXPECT_GT(exp_approx(-87.0f), std::numeric_limits<float>::min());
  // Above 88: the value at 88, finite.
  const float at88 = exp_approx(88.0f);
  EXPECT_TRUE(std::isfinite(at88));
  for (float x : {std::nextafter(88.0f, inf), 88.7f, 89.0f, 1e30f, inf}) {
    EXPECT_EQ(bits_of(exp_approx(x)), bits_of(at88)) << x;
  }
  // 0 exactly to 1; NaN stays NaN.
  EXPECT_EQ(exp_approx(0.0f), 1.0f);
  EXPECT_EQ(exp_approx(-0.0f), 1.0f);
  EXPECT_TRUE(std::isnan(exp_approx(std::numeric_limits<float>::quiet_NaN())));
  EXPECT_TRUE(std::isnan(exp_approx(-std::numeric_limits<float>::quiet_NaN())));
}

}  // namespace
}  // namespace nanogpt
