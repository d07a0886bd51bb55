// The attention's per-tile softmax loops: the AVX-512 forms (intrinsics, what CPUs with AVX-512
// run) against the loops compiled per ISA (what the others run), bit for bit in builds that
// fuse multiply-adds (same_value, below), on random scores
// with full and partial visibility, rows that see nothing, a first and a later visit of a
// query's running max, partial tiles, and garbage (NaN, inf) in the hidden part of dP.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "kernels/attention_mask.hpp"
#include "kernels/attention_tile_math.hpp"
#include "runtime/cpu_info.hpp"
#include "support/float_bits.hpp"
#include "support/fused_multiply_add.hpp"

namespace nanogpt {
namespace {

using test::bits_of;

// got against want: the same bits where the build fuses multiply-adds (the cloned loops' are then
// fused as the AVX-512 forms spell them, kernels/exp_approx_avx512.hpp); elsewhere (-O1, the
// sanitizer build) the clones fuse nothing, and the two may differ by a few ulp.
::testing::AssertionResult same_value(float got, float want) {
  if (bits_of(got) == bits_of(want)) return ::testing::AssertionSuccess();
  if (!test::build_fuses_multiply_add() &&
      std::abs(got - want) <= 4e-6f * std::max(std::abs(got), std::abs(want))) {
    return ::testing::AssertionSuccess();
  }
  return ::testing::AssertionFailure() << got << " against " << want;
}

// Each query's visible keys within nk: all, none, or a random range.
void random_ranges(std::mt19937& rng, int64_t nk, int32_t* lo, int32_t* hi) {
  for (int64_t q = 0; q < kBq; ++q) {
    const int kind = static_cast<int>(rng() % 4);
    int32_t a = static_cast<int32_t>(rng() % (nk + 1)), b = static_cast<int32_t>(rng() % (nk + 1));
    if (a > b) std::swap(a, b);
    if (kind == 0) a = 0, b = static_cast<int32_t>(nk);
    if (kind == 1) b = a;  // sees nothing here
    lo[q] = a;
    hi[q] = b;
  }
}

TEST(AttentionTileMath, OnlineSoftmaxAvx512MatchesTheClonedLoops) {
  if (!cpu_info().avx512f) GTEST_SKIP() << "no AVX-512F: the cloned loops are what runs";
  std::mt19937 rng(11);
  std::normal_distribution<float> score(0.0f, 4.0f);
  for (const int64_t nk : {int64_t{128}, int64_t{57}}) {
    for (const int64_t nq : {int64_t{128}, int64_t{100}, int64_t{17}, int64_t{1}}) {
      for (const bool full : {true, false}) {
        for (const bool first_visit : {true, false}) {
          std::vector<float> s(kBq * kBq);
          for (float& x : s) x = score(rng);
          int32_t lo[kBq], hi[kBq];
          random_ranges(rng, nk, lo, hi);
          float m[2][kBq], l[2][kBq], alpha[2][kBq];
          for (int64_t q = 0; q < kBq; ++q) {
            m[0][q] = m[1][q] = first_visit ? kNegInf : score(rng);
            l[0][q] = l[1][q] = first_visit ? 0.0f : 1.0f + std::abs(score(rng));
          }
          std::vector<float> s_portable = s;
          online_softmax_tile_portable(s_portable.data(), nk, nq, lo, hi, full, 0.125f, m[0], l[0],
                                       alpha[0]);
          online_softmax_tile(s.data(), nk, nq, lo, hi, full, 0.125f, m[1], l[1], alpha[1]);
          for (int64_t q = 0; q < nq; ++q) {
            const auto where = [&] {
              return "nk " + std::to_string(nk) + ", nq " + std::to_string(nq) + ", full " +
                     std::to_string(full) + ", first " + std::to_string(first_visit) + ", query " +
                     std::to_string(q);
            };
            ASSERT_EQ(bits_of(m[1][q]), bits_of(m[0][q])) << where();  // a max: exact
            ASSERT_TRUE(same_value(l[1][q], l[0][q])) << where();
            ASSERT_TRUE(same_value(alpha[1][q], alpha[0][q])) << where();
            for (int64_t j = 0; j < nk; ++j) {
              ASSERT_TRUE(same_value(s[j * kBq + q], s_portable[j * kBq + q]))
                  << where() << ", key " << j;
            }
          }
        }
      }
    }
  }
}

TEST(AttentionTileMath, ProbsAndGradsAvx512MatchesTheClonedLoops) {
  if (!cpu_info().avx512f) GTEST_SKIP() << "no AVX-512F: the cloned loops are what runs";
  std::mt19937 rng(12);
  std::normal_distribution<float> value(0.0f, 3.0f);
  const float garbage[] = {std::numeric_limits<float>::quiet_NaN(),
                           std::numeric_limits<float>::infinity(), -1e30f};
  for (const int64_t nq : {int64_t{128}, int64_t{33}, int64_t{1}}) {
    std::vector<float> s(kBq * kBk), dp(kBq * kBk), lse(kBq), delta(kBq);
    for (float& x : s) x = value(rng);
    for (float& x : dp) x = value(rng);
    for (int64_t i = 0; i < kBq; ++i) {
      lse[static_cast<size_t>(i)] = 2.0f + std::abs(value(rng));
      delta[static_cast<size_t>(i)] = value(rng);
    }
    int32_t lo[kBq], hi[kBq];
    random_ranges(rng, kBk, lo, hi);
    // Hidden pairs may hold anything in dP (the products leave those micro-tiles as they were).
    for (int64_t i = 0; i < kBq; ++i) {
      for (int64_t j = 0; j < kBk; ++j) {
        if (j < lo[i] || j >= hi[i]) dp[static_cast<size_t>(i * kBk + j)] = garbage[(i + j) % 3];
      }
    }
    std::vector<float> s_portable = s, dp_portable = dp;
    probs_and_grads_tile_portable(s_portable.data(), dp_portable.data(), nq, lo, hi, 0.125f,
                                  lse.data(), delta.data());
    probs_and_grads_tile(s.data(), dp.data(), nq, lo, hi, 0.125f, lse.data(), delta.data());
    for (int64_t i = 0; i < nq; ++i) {
      for (int64_t j = 0; j < kBk; ++j) {
        const size_t at = static_cast<size_t>(i * kBk + j);
        ASSERT_TRUE(same_value(s[at], s_portable[at])) << "nq " << nq << " at " << i << ", " << j;
        ASSERT_TRUE(same_value(dp[at], dp_portable[at])) << "nq " << nq << " at " << i << ", " << j;
        if (j < lo[i] || j >= hi[i]) {
          ASSERT_EQ(bits_of(dp[at]), 0u) << "hidden dS at " << i << ", " << j;
        }
      }
    }
  }
}

}  // namespace
}  // namespace nanogpt
