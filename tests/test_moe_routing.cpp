// MoE token permutation: the plan's counts, offsets and stable order; gather and combine
// against a dense tokens × experts reference (built here only); their backwards against the
// dense reference and as true adjoints (<f(x), y> = <x, f*(y)>); bitwise identical for any
// thread count; clear errors for bad routing.
//
// Error bounds: gather and its plain copies are exact. A combine sums k products per value in
// fp32 against the reference's double: |got − want| ≤ (k + 1)·2⁻²⁴·Σ_s|w_s·y_s| (allowed
// twice that). A weight gradient is a d-long dot summed in double, then rounded once: within
// 2⁻²⁴·|want| + a few ulps of the double sum (allowed 2·2⁻²⁴·Σ|g·y|).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels/moe_routing.hpp"
#include "runtime/error.hpp"
#include "runtime/thread_pool.hpp"

namespace nanogpt {
namespace {

std::vector<float> random_values(size_t n, std::mt19937& rng) {
  std::uniform_real_distribution<float> u(0.25f, 2.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = (rng() & 1 ? 1.0f : -1.0f) * u(rng);
  return v;
}

struct Routing {
  int64_t tokens, experts, top_k;
  std::vector<int32_t> ids;
  std::vector<float> weights;
};

// Distinct experts per token (as top-k gives), skewed towards the low ids so that some experts
// get many tokens and the last may get none; weights positive, not normalized.
Routing random_routing(int64_t tokens, int64_t experts, int64_t top_k, uint32_t seed) {
  std::mt19937 rng(seed);
  Routing r{tokens, experts, top_k, {}, {}};
  std::uniform_real_distribution<float> u(0.1f, 1.0f);
  for (int64_t t = 0; t < tokens; ++t) {
    std::vector<int32_t> chosen;
    while (static_cast<int64_t>(chosen.size()) < top_k) {
      // Squaring a uniform skews the choice towards expert 0.
      const double x = std::uniform_real_distribution<double>(0, 1)(rng);
      const auto e = static_cast<int32_t>(x * x * static_cast<double>(experts));
      if (std::find(chosen.begin(), chosen.end(), e) == chosen.end()) chosen.push_back(e);
    }
    for (int32_t e : chosen) {
      r.ids.push_back(e);
      r.weights.push_back(u(rng));
    }
  }
  return r;
}

bool same_bits(const std::vector<float>& x, const std::vector<float>& y) {
  return x.size() == y.size() && std::memcmp(x.data(), y.data(), x.size() * sizeof(float)) == 0;
}

TEST(MoeRouting, PlanCountsOffsetsAndStableOrder) {
  const Routing r = random_routing(300, 7, 3, 1);
  const MoePlan plan = plan_moe_routing(r.tokens, r.experts, r.top_k, r.ids.data());
  ASSERT_EQ(plan.offsets.size(), 8u);
  EXPECT_EQ(plan.offsets[0], 0);
  EXPECT_EQ(plan.offsets[7], 900);
  for (int64_t e = 0; e < 7; ++e) {
    int64_t count = 0;
    for (int32_t id : r.ids) count += id == e ? 1 : 0;
    EXPECT_EQ(plan.offsets[e + 1] - plan.offsets[e], count) << "expert " << e;
  }
  for (int64_t row = 0; row < plan.rows(); ++row) {
    const int64_t entry = plan.entry_of_row[row];
    EXPECT_EQ(plan.row_of_entry[entry], row);
    const int32_t e = r.ids[entry];
    EXPECT_GE(row, plan.offsets[e]);
    EXPECT_LT(row, plan.offsets[e + 1]);
    // Stable: within an expert, entries (token, then slot) increase.
    if (row > plan.offsets[e]) {
      EXPECT_LT(plan.entry_of_row[row - 1], entry);
    }
  }
}

TEST(MoeRouting, EmptyExpertsAndNoTokens) {
  const std::vector<int32_t> ids = {2, 2, 2};  // top-1, only expert 2 of 4
  const MoePlan plan = plan_moe_routing(3, 4, 1, ids.data());
  EXPECT_EQ(plan.offsets, (std::vector<int64_t>{0, 0, 0, 3, 3}));
  const MoePlan none = plan_moe_routing(0, 4, 2, nullptr);
  EXPECT_EQ(none.offsets, (std::vector<int64_t>{0, 0, 0, 0, 0}));
  EXPECT_EQ(none.rows(), 0);
}

// The dense reference: expert outputs indexed [token][expert] (only routed pairs are read), and
// the tokens × experts weight matrix.
struct Dense {
  int64_t tokens, experts, d;
  std::vector<double> weight;  // [t][e], 0 where not routed
  std::vector<double> out;     // [t][e][j]
};

TEST(MoeRouting, GatherAndCombineMatchDenseReference) {
  const int64_t d = 19, ldx = 23;
  const Routing r = random_routing(130, 8, 2, 2);
  const MoePlan plan = plan_moe_routing(r.tokens, r.experts, r.top_k, r.ids.data());
  std::mt19937 rng(3);
  const std::vector<float> X = random_values(static_cast<size_t>(r.tokens * ldx), rng);
  std::vector<float> Xe(static_cast<size_t>(plan.rows() * d));
  moe_gather(plan, d, X.data(), ldx, Xe.data());
  // Expert e's rows are exactly its tokens' rows of X, in token order.
  for (int64_t e = 0; e < r.experts; ++e) {
    int64_t row = plan.offsets[e];
    for (int64_t t = 0; t < r.tokens; ++t) {
      for (int64_t s = 0; s < r.top_k; ++s) {
        if (r.ids[t * r.top_k + s] != e) continue;
        for (int64_t j = 0; j < d; ++j) ASSERT_EQ(Xe[row * d + j], X[t * ldx + j]);
        ++row;
      }
    }
    EXPECT_EQ(row, plan.offsets[e + 1]);
  }

  // Expert outputs Ye (any values), combined with the weights, against the dense sum
  // Y[t] = Σ_e W[t][e]·out[t][e].
  const std::vector<float> Ye = random_values(Xe.size(), rng);
  Dense dense{r.tokens, r.experts, d, {}, {}};
  dense.weight.assign(static_cast<size_t>(r.tokens * r.experts), 0.0);
  dense.out.assign(static_cast<size_t>(r.tokens * r.experts * d), 0.0);
  for (int64_t row = 0; row < plan.rows(); ++row) {
    const int64_t entry = plan.entry_of_row[row], t = entry / r.top_k;
    const int32_t e = r.ids[entry];
    dense.weight[t * r.experts + e] = r.weights[entry];
    for (int64_t j = 0; j < d; ++j) dense.out[(t * r.experts + e) * d + j] = Ye[row * d + j];
  }
  const int64_t ldy = d + 2;
  std::vector<float> Y0 = random_values(static_cast<size_t>(r.tokens * ldy), rng);
  for (bool accumulate : {false, true}) {
    std::vector<float> Y = Y0;
    moe_combine(plan, d, Ye.data(), r.weights.data(), Y.data(), ldy, accumulate);
    for (int64_t t = 0; t < r.tokens; ++t) {
      for (int64_t j = 0; j < ldy; ++j) {
        const size_t idx = static_cast<size_t>(t * ldy + j);
        if (j >= d) {
          ASSERT_EQ(Y[idx], Y0[idx]) << "wrote past d";
          continue;
        }
        double want = accumulate ? Y0[idx] : 0.0, magnitude = accumulate ? std::abs(Y0[idx]) : 0;
        for (int64_t e = 0; e < r.experts; ++e) {
          const double term =
              dense.weight[t * r.experts + e] * dense.out[(t * r.experts + e) * d + j];
          want += term;
          magnitude += std::abs(term);
        }
        const double bound = 2 * (r.top_k + 1) * std::ldexp(1.0, -24) * magnitude;
        ASSERT_NEAR(Y[idx], want, bound) << "token " << t << " col " << j;
      }
    }
  }
}

TEST(MoeRouting, BackwardsMatchDenseReferenceAndAreAdjoints) {
  const int64_t d = 21, ldx = 24, ldy = 22;
  const Routing r = random_routing(97, 6, 3, 4);
  const MoePlan plan = plan_moe_routing(r.tokens, r.experts, r.top_k, r.ids.data());
  std::mt19937 rng(5);
  const std::vector<float> X = random_values(static_cast<size_t>(r.tokens * ldx), rng);
  const std::vector<float> dXe = random_values(static_cast<size_t>(plan.rows() * d), rng);
  const std::vector<float> Ye = random_values(dXe.size(), rng);
  const std::vector<float> dY = random_values(static_cast<size_t>(r.tokens * ldy), rng);

  // Gather's backward: dX[t] = Σ_s dXe[row(t, s)]; with accumulate, onto what was there.
  const std::vector<float> dX0 = random_values(static_cast<size_t>(r.tokens * ldx), rng);
  for (bool accumulate : {false, true}) {
    std::vector<float> dX = dX0;
    moe_gather_backward(plan, d, dXe.data(), dX.data(), ldx, accumulate);
    for (int64_t t = 0; t < r.tokens; ++t) {
      for (int64_t j = 0; j < ldx; ++j) {
        const size_t idx = static_cast<size_t>(t * ldx + j);
        if (j >= d) {
          ASSERT_EQ(dX[idx], dX0[idx]);
          continue;
        }
        double want = accumulate ? dX0[idx] : 0.0, magnitude = std::abs(want);
        for (int64_t s = 0; s < r.top_k; ++s) {
          const double v = dXe[plan.row_of_entry[t * r.top_k + s] * d + j];
          want += v;
          magnitude += std::abs(v);
        }
        ASSERT_NEAR(dX[idx], want, 2 * (r.top_k + 1) * std::ldexp(1.0, -24) * magnitude);
      }
    }
  }

  // Combine's backward against the dense formulas dYe = w·dY[t], dw = <dY[t], Ye[row]>.
  std::vector<float> dYe(Ye.size()), dw(r.weights.size());
  moe_combine_backward(plan, d, dY.data(), ldy, Ye.data(), r.weights.data(), dYe.data(), dw.data());
  for (int64_t entry = 0; entry < plan.rows(); ++entry) {
    const int64_t t = entry / r.top_k, row = plan.row_of_entry[entry];
    double dot = 0, magnitude = 0;
    for (int64_t j = 0; j < d; ++j) {
      ASSERT_EQ(dYe[row * d + j], r.weights[entry] * dY[t * ldy + j]);  // one fp32 product
      const double p = static_cast<double>(dY[t * ldy + j]) * Ye[row * d + j];
      dot += p;
      magnitude += std::abs(p);
    }
    ASSERT_NEAR(dw[entry], dot, 2 * std::ldexp(1.0, -24) * magnitude) << "entry " << entry;
  }

  // Adjoints, in double: <gather(X), dXe> = <X, gather*(dXe)> and
  // <combine(Ye, w), dY> = <Ye, dYe> = <w, dw> (combine is linear in each).
  std::vector<float> Xe(dXe.size()), dX(X.size(), 0.0f), Y(dY.size(), 0.0f);
  moe_gather(plan, d, X.data(), ldx, Xe.data());
  moe_gather_backward(plan, d, dXe.data(), dX.data(), ldx, false);
  moe_combine(plan, d, Ye.data(), r.weights.data(), Y.data(), ldy, false);
  auto dot = [](const float* a, const float* b, int64_t rows, int64_t cols, int64_t lda,
                int64_t ldb) {
    double s = 0, m = 0;
    for (int64_t i = 0; i < rows; ++i) {
      for (int64_t j = 0; j < cols; ++j) {
        s += static_cast<double>(a[i * lda + j]) * b[i * ldb + j];
        m += std::abs(static_cast<double>(a[i * lda + j]) * b[i * ldb + j]);
      }
    }
    return std::pair{s, m};
  };
  const auto [lhs_g, m_g] = dot(Xe.data(), dXe.data(), plan.rows(), d, d, d);
  const auto [rhs_g, unused_g] = dot(X.data(), dX.data(), r.tokens, d, ldx, ldx);
  EXPECT_NEAR(lhs_g, rhs_g, 1e-6 * m_g);
  const auto [lhs_c, m_c] = dot(Y.data(), dY.data(), r.tokens, d, ldy, ldy);
  const auto [rhs_y, unused_y] = dot(Ye.data(), dYe.data(), plan.rows(), d, d, d);
  const auto [rhs_w, unused_w] =
      dot(r.weights.data(), dw.data(), 1, static_cast<int64_t>(dw.size()), 0, 0);
  EXPECT_NEAR(lhs_c, rhs_y, 1e-6 * m_c);
  EXPECT_NEAR(lhs_c, rhs_w, 1e-6 * m_c);
}

TEST(MoeRouting, WeightGradientByFiniteDifferences) {
  // L = Σ dY ⊙ combine(Ye, w) is linear in w, so a central difference in double is exact up
  // to rounding of L: check a few entries of dw against it.
  const int64_t d = 16;
  const Routing r = random_routing(40, 5, 2, 6);
  const MoePlan plan = plan_moe_routing(r.tokens, r.experts, r.top_k, r.ids.data());
  std::mt19937 rng(7);
  const std::vector<float> Ye = random_values(static_cast<size_t>(plan.rows() * d), rng);
  const std::vector<float> dY = random_values(static_cast<size_t>(r.tokens * d), rng);
  std::vector<float> dYe(Ye.size()), dw(r.weights.size());
  moe_combine_backward(plan, d, dY.data(), d, Ye.data(), r.weights.data(), dYe.data(), dw.data());
  auto loss = [&](const std::vector<float>& w) {
    std::vector<float> Y(dY.size());
    moe_combine(plan, d, Ye.data(), w.data(), Y.data(), d, false);
    double s = 0;
    for (size_t i = 0; i < Y.size(); ++i) s += static_cast<double>(Y[i]) * dY[i];
    return s;
  };
  for (size_t entry : {size_t{0}, size_t{17}, size_t{79}}) {
    const float h = 1.0f / 64;  // exact in fp32, so w ± h is exact for these magnitudes
    std::vector<float> plus = r.weights, minus = r.weights;
    plus[entry] += h;
    minus[entry] -= h;
    const double fd = (loss(plus) - loss(minus)) / (2.0 * h);
    EXPECT_NEAR(dw[entry], fd, 1e-4 * (1 + std::abs(fd))) << "entry " << entry;
  }
}

TEST(MoeRouting, BitwiseIdenticalForAnyThreadCount) {
  const int64_t d = 33;
  const Routing r = random_routing(500, 8, 2, 8);
  const MoePlan plan = plan_moe_routing(r.tokens, r.experts, r.top_k, r.ids.data());
  std::mt19937 rng(9);
  const std::vector<float> X = random_values(static_cast<size_t>(r.tokens * d), rng);
  const std::vector<float> Ye = random_values(static_cast<size_t>(plan.rows() * d), rng);
  std::vector<std::vector<float>> results;
  for (int threads : {1, 2, 3}) {
    ThreadPool pool(threads);
    ThreadPool::Use use(pool);
    std::vector<float> Xe(Ye.size()), dX(X.size()), Y(X.size()), dYe(Ye.size()),
        dw(r.weights.size());
    moe_gather(plan, d, X.data(), d, Xe.data());
    moe_gather_backward(plan, d, Ye.data(), dX.data(), d, false);
    moe_combine(plan, d, Ye.data(), r.weights.data(), Y.data(), d, false);
    moe_combine_backward(plan, d, X.data(), d, Ye.data(), r.weights.data(), dYe.data(), dw.data());
    std::vector<float> all;
    for (const auto* v : {&Xe, &dX, &Y, &dYe, &dw}) all.insert(all.end(), v->begin(), v->end());
    results.push_back(all);
  }
  EXPECT_TRUE(same_bits(results[0], results[1]));
  EXPECT_TRUE(same_bits(results[0], results[2]));
}

template <class Fn>
void expect_input_error(const Fn& fn, const std::string& needle) {
  try {
    fn();
    ADD_FAILURE() << "no InputError; expected one mentioning " << needle;
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(MoeRouting, BadRoutingIsAnInputError) {
  const std::vector<int32_t> ids = {0, 1, 3, 4};
  expect_input_error([&] { plan_moe_routing(2, 4, 2, ids.data()); },
                     "token 1, choice 1 names expert 4, outside [0, 4)");
  const std::vector<int32_t> negative = {0, -1};
  expect_input_error([&] { plan_moe_routing(1, 4, 2, negative.data()); }, "names expert -1");
  expect_input_error([&] { plan_moe_routing(2, 4, 0, ids.data()); }, "experts per token = 0");
  expect_input_error([&] { plan_moe_routing(2, 2, 3, ids.data()); }, "experts per token = 3");
  expect_input_error([&] { plan_moe_routing(-1, 4, 2, ids.data()); }, "tokens = -1");
  const std::vector<int32_t> fine = {0, 1};
  const MoePlan plan = plan_moe_routing(1, 2, 2, fine.data());
  std::vector<float> x(8), xe(8);
  expect_input_error([&] { moe_gather(plan, 4, x.data(), 3, xe.data()); }, "ldx = 3");
}

}  // namespace
}  // namespace nanogpt
