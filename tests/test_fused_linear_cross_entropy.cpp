#include "kernels/fused_linear_cross_entropy.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "kernels/bf16.hpp"
#include "kernels/fp8.hpp"
#include "kernels/loss_rows_avx512.hpp"
#include "kernels/matmul.hpp"
#include "runtime/cpu_info.hpp"
#include "runtime/error.hpp"
#include "runtime/thread_pool.hpp"
#include "runtime/workspace.hpp"
#include "support/fused_multiply_add.hpp"
#include "support/reference.hpp"

namespace nanogpt {
namespace {

constexpr float kNan = std::numeric_limits<float>::quiet_NaN();

struct Problem {
  int64_t T = 0, d = 0, V = 0;
  std::vector<float> x, W;
  std::vector<int32_t> targets;

  FusedLossParams params() const {
    FusedLossParams p;
    p.T = T;
    p.d = d;
    p.V = V;
    p.x = x.data();
    p.W = W.data();
    p.targets = targets.data();
    return p;
  }
};

// x ~ U(-1, 1) like a normed activation; W ~ U(-w_range, w_range). With w_range ≈ 20 the
// pre-cap logits z/(7.5·√d) spread over about ±1, so the cap is far from linear and the softmax
// is peaked; with w_range ≈ 1 it is nearly flat. Targets are random but include 0 and V-1.
Problem make_problem(int64_t T, int64_t d, int64_t V, float w_range, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> ux(-1.0f, 1.0f), uw(-w_range, w_range);
  std::uniform_int_distribution<int32_t> ut(0, static_cast<int32_t>(V - 1));
  Problem pr;
  pr.T = T;
  pr.d = d;
  pr.V = V;
  pr.x.resize(static_cast<size_t>(T * d));
  pr.W.resize(static_cast<size_t>(V * d));
  pr.targets.resize(static_cast<size_t>(T));
  for (auto& v : pr.x) v = ux(rng);
  for (auto& v : pr.W) v = uw(rng);
  for (auto& t : pr.targets) t = ut(rng);
  pr.targets.front() = T == 1 ? static_cast<int32_t>(V - 1) : 0;
  pr.targets.back() = static_cast<int32_t>(V - 1);
  return pr;
}

// ---- an independent reference, in double ------------------------------------------------

struct Reference {
  std::vector<double> loss;     // per token, unweighted
  double total = 0;             // Σ w_t·loss_t
  std::vector<double> dx, dW;   // of loss_scale·Σ w_t·loss_t
  std::vector<double> entropy;  // per token, of softmax(y/τ)
};

// Post-training's weighted, tempered loss (FusedLossParams::row_weights, temperature).
struct Weighting {
  std::vector<double> weights;  // empty: all 1
  double temperature = 1.0;
};

// The head written out the obvious way: full logits, max-shifted log-softmax, and the
// gradient by hand. `grad_scale` > 0 rounds dL/dz (of the summed loss) to E5M2 as the FP8 head
// does; the inputs must already be rounded if the FP8 head is being modelled.
Reference reference_head(int64_t T, int64_t d, int64_t V, const std::vector<double>& x,
                         const std::vector<double>& W, const std::vector<int32_t>& targets,
                         double softcap, double divisor, double loss_scale, float grad_scale,
                         bool grads = true, const Weighting& weighting = {}) {
  Reference r;
  r.loss.resize(static_cast<size_t>(T));
  r.entropy.resize(static_cast<size_t>(T));
  const double tau = weighting.temperature;
  std::vector<double> z(static_cast<size_t>(T * V)), G(static_cast<size_t>(T * V));
  reference_gemm(Trans::kNo, Trans::kYes, T, V, d, 1.0, x.data(), d, W.data(), d, 0.0, z.data(), V);
  std::vector<double> y(static_cast<size_t>(V));
  for (int64_t t = 0; t < T; ++t) {
    const double* zt = z.data() + t * V;
    for (int64_t j = 0; j < V; ++j) {
      y[j] = (softcap > 0 ? softcap / (1.0 + std::exp(-zt[j] / divisor)) : zt[j]) / tau;
    }
    const double m = *std::max_element(y.begin(), y.end());
    double sum = 0;
    for (double v : y) sum += std::exp(v - m);
    const double lse = m + std::log(sum);
    const int32_t target = targets[t];
    const double w = weighting.weights.empty() ? 1.0 : weighting.weights[static_cast<size_t>(t)];
    r.loss[t] = lse - y[target];
    r.total += w * r.loss[t];
    for (int64_t j = 0; j < V; ++j) r.entropy[t] -= std::exp(y[j] - lse) * (y[j] - lse);
    for (int64_t j = 0; j < V; ++j) {
      double dydz = 1.0 / tau;
      if (softcap > 0) {
        const double sigma = 1.0 / (1.0 + std::exp(-zt[j] / divisor));
        dydz = softcap / divisor * sigma * (1.0 - sigma) / tau;
      }
      double g = (std::exp(y[j] - lse) - (j == target ? 1.0 : 0.0)) * dydz * w;
      if (grad_scale > 0) {
        g = static_cast<double>(round_to_e5m2(static_cast<float>(g) * (1.0f / grad_scale)) *
                                grad_scale);
      }
      G[static_cast<size_t>(t * V + j)] = g * loss_scale;
    }
  }
  if (grads) {
    r.dx.resize(static_cast<size_t>(T * d));
    r.dW.resize(static_cast<size_t>(V * d));
    reference_gemm(Trans::kNo, Trans::kNo, T, d, V, 1.0, G.data(), V, W.data(), d, 0.0, r.dx.data(),
                   d);
    reference_gemm(Trans::kYes, Trans::kNo, V, d, T, 1.0, G.data(), V, x.data(), d, 0.0,
                   r.dW.data(), d);
  }
  return r;
}

std::vector<double> to_double(const std::vector<float>& v) {
  return std::vector<double>(v.begin(), v.end());
}

// The reference for the params `p` asks for, with the FP8 rounding applied explicitly:
// xq = round_to_e4m3(x·(1/x_s))·x_s, wq likewise with w_s, and dL/dz rounded to E5M2 after
// multiplying by 1/grad_s. (Multiplying by the reciprocal is quantize_e4m3's convention.)
// With bf16, x and W are rounded to bf16 as the products see them; the products' rounding of
// dL/dz to bf16 is not modelled (the bf16 test's gradient bound allows for it).
Reference reference_for(const Problem& pr, const FusedLossParams& p) {
  const double divisor = p.softcap_divisor > 0 ? p.softcap_divisor : 7.5 * std::sqrt(double(pr.d));
  std::vector<double> x = to_double(pr.x), W = to_double(pr.W);
  if (p.precision == Precision::kBf16) {
    for (size_t i = 0; i < x.size(); ++i) x[i] = round_to_bf16(pr.x[i]);
    for (size_t i = 0; i < W.size(); ++i) W[i] = round_to_bf16(pr.W[i]);
  }
  if (p.fp8) {
    const float xs = p.x_scale > 0 ? p.x_scale : static_cast<float>(std::sqrt(double(pr.d)) / 448);
    for (size_t i = 0; i < x.size(); ++i) x[i] = round_to_e4m3(pr.x[i] * (1.0f / xs)) * xs;
    for (size_t i = 0; i < W.size(); ++i) {
      W[i] = round_to_e4m3(pr.W[i] * (1.0f / p.w_scale)) * p.w_scale;
    }
  }
  Weighting weighting;
  if (p.row_weights != nullptr) weighting.weights.assign(p.row_weights, p.row_weights + pr.T);
  weighting.temperature = p.temperature;
  return reference_head(pr.T, pr.d, pr.V, x, W, pr.targets, p.softcap, divisor, p.loss_scale,
                        p.fp8 ? p.grad_scale : 0.0f, true, weighting);
}

// ‖(got - base) - want‖ / ‖want‖, in double.
double relative_error(const std::vector<float>& got, const std::vector<double>& want,
                      const std::vector<float>* base = nullptr) {
  double num = 0, den = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    double g = got[i];
    if (base != nullptr) g -= (*base)[i];
    num += (g - want[i]) * (g - want[i]);
    den += want[i] * want[i];
  }
  return std::sqrt(num / den);
}

double rms(const std::vector<double>& v) {
  double s = 0;
  for (double e : v) s += e * e;
  return std::sqrt(s / static_cast<double>(v.size()));
}

// The largest errors seen, printed so the bounds below can be judged against them.
struct Observed {
  double loss = 0, dx = 0, dW = 0;
  void print(const char* what) const {
    std::printf(
        "[   info   ] %s: max per-token loss error %.2e (relative to 1+|loss|), "
        "max ‖dx-ref‖/‖ref‖ %.2e, max ‖dW-ref‖/‖ref‖ %.2e\n",
        what, loss, dx, dW);
  }
};

struct Outputs {
  double forward_total = 0, backward_total = 0;
  std::vector<float> per_token, dx, dW, dW_initial;
};

// Runs the forward and the backward with poisoned outputs; dW starts from random values of the
// reference gradient's size, so accumulation (not overwrite) is what gets checked.
Outputs run_fused(const Problem& pr, const FusedLossParams& p, double dW_rms, uint32_t seed) {
  Outputs o;
  o.per_token.assign(static_cast<size_t>(pr.T), kNan);
  o.dx.assign(static_cast<size_t>(pr.T * pr.d), kNan);
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  o.dW_initial.resize(static_cast<size_t>(pr.V * pr.d));
  for (auto& v : o.dW_initial) v = u(rng) * static_cast<float>(dW_rms);
  o.dW = o.dW_initial;
  o.forward_total = fused_linear_cross_entropy_forward(p, o.per_token.data());
  o.backward_total = fused_linear_cross_entropy_backward(p, o.dx.data(), o.dW.data());
  return o;
}

void check_against_reference(const Problem& pr, const FusedLossParams& p, const Reference& ref,
                             double loss_tol, double grad_tol, Observed& seen,
                             const std::string& label) {
  const Outputs o = run_fused(pr, p, rms(ref.dW), static_cast<uint32_t>(pr.T * 31 + pr.V));
  double loss_err = 0;
  for (int64_t t = 0; t < pr.T; ++t) {
    const auto k = static_cast<size_t>(t);
    ASSERT_TRUE(std::isfinite(o.per_token[k])) << label << " t=" << t;
    loss_err =
        std::max(loss_err, std::abs(o.per_token[k] - ref.loss[k]) / (1.0 + std::abs(ref.loss[k])));
  }
  EXPECT_LT(loss_err, loss_tol) << label;
  EXPECT_NEAR(o.forward_total, ref.total, loss_tol * (pr.T + std::abs(ref.total))) << label;
  // The backward computes each row's loss exactly as the forward does.
  EXPECT_EQ(o.backward_total, o.forward_total) << label;
  for (size_t i = 0; i < o.dx.size(); ++i)
    ASSERT_TRUE(std::isfinite(o.dx[i])) << label << " dx " << i;
  for (size_t i = 0; i < o.dW.size(); ++i)
    ASSERT_TRUE(std::isfinite(o.dW[i])) << label << " dW " << i;
  const double dx_err = relative_error(o.dx, ref.dx);
  const double dW_err = relative_error(o.dW, ref.dW, &o.dW_initial);
  EXPECT_LT(dx_err, grad_tol) << label;
  EXPECT_LT(dW_err, grad_tol) << label;
  seen.loss = std::max(seen.loss, loss_err);
  seen.dx = std::max(seen.dx, dx_err);
  seen.dW = std::max(seen.dW, dW_err);
}

// Gradient blocks: the default (one block for every T here), a block that divides none of the
// T here (several blocks and a ragged last one), and a block smaller than a GEMM register block.
// Logits blocks: the default (the whole gradient block for every V here), and several per
// gradient block, with a ragged last one, in one block and in several.
struct BlockChoice {
  int64_t row_block, logit_rows;
};
constexpr BlockChoice kBlockChoices[] = {{0, 0}, {64, 0}, {5, 0}, {0, 13}, {64, 24}};

void set_blocks(FusedLossParams& p, const BlockChoice& b) {
  p.row_block = b.row_block;
  p.logit_rows = b.logit_rows;
}

std::string describe(const FusedLossParams& p) {
  return "T=" + std::to_string(p.T) + " d=" + std::to_string(p.d) + " V=" + std::to_string(p.V) +
         " row_block=" + std::to_string(p.row_block) + " (" +
         std::to_string(fused_linear_cross_entropy_row_block(p)) +
         ") logit_rows=" + std::to_string(p.logit_rows) + " (" +
         std::to_string(fused_linear_cross_entropy_logit_rows(p)) +
         ") loss_scale=" + std::to_string(p.loss_scale) + (p.fp8 ? " fp8" : "") +
         (p.precision == Precision::kBf16 ? " bf16" : "");
}

// ---- tests ----------------------------------------------------------------------------------

TEST(FusedLinearCrossEntropy, ReferenceGradientMatchesFiniteDifferences) {
  // The reference's hand-written gradient against central differences of its own loss, in
  // double: with h = 1e-5 the truncation error is ~h²·|f'''| ≈ 1e-10, far below the bound.
  const int64_t T = 3, d = 4, V = 5;
  const Problem pr = make_problem(T, d, V, 8.0f, 7);
  std::vector<double> x = to_double(pr.x), W = to_double(pr.W);
  const double softcap = 30, divisor = 2.5, loss_scale = 0.75;  // a small divisor: strongly curved
  const Reference ref =
      reference_head(T, d, V, x, W, pr.targets, softcap, divisor, loss_scale, 0.0f);
  auto loss_at = [&]() {
    return loss_scale *
           reference_head(T, d, V, x, W, pr.targets, softcap, divisor, 1.0, 0.0f, false).total;
  };
  const double h = 1e-5;
  double worst = 0;
  auto check = [&](std::vector<double>& v, const std::vector<double>& grad) {
    for (size_t i = 0; i < v.size(); ++i) {
      const double saved = v[i];
      v[i] = saved + h;
      const double up = loss_at();
      v[i] = saved - h;
      const double down = loss_at();
      v[i] = saved;
      const double fd = (up - down) / (2 * h);
      const double err = std::abs(fd - grad[i]) / (1e-3 + std::abs(grad[i]));
      worst = std::max(worst, err);
      EXPECT_LT(err, 1e-6) << "index " << i << " fd " << fd << " analytic " << grad[i];
    }
  };
  check(x, ref.dx);
  check(W, ref.dW);
  std::printf("[   info   ] finite differences vs reference gradient: max relative error %.2e\n",
              worst);
}

// Bounds: z is an fp32 dot product of at most 64 terms and exp/σ are within 2 ulp, so a loss
// (up to ~35) carries errors of a few ulp of 30, ~1e-6 relative to 1 + |loss|, and gradients
// ~1e-7..1e-6 of their norm. The bounds, 5e-6 for both, leave several times that.
// V = 13 is less than one vector of the row kernels; V = 2053 (prime) spans several of the
// float segments the row's sum of exponentials is split into.
TEST(FusedLinearCrossEntropy, MatchesReferenceOnAwkwardShapes) {
  Observed seen;
  uint32_t seed = 100;
  for (int64_t T : {1, 7, 127, 129, 300}) {
    for (int64_t d : {8, 24, 64}) {
      for (int64_t V : {13, 384, 1000, 2053}) {
        ++seed;
        const Problem pr = make_problem(T, d, V, seed % 2 == 0 ? 20.0f : 1.0f, seed);
        FusedLossParams p = pr.params();
        const float loss_scales[] = {1.0f, 1.0f / static_cast<float>(T), 0.37f};
        p.loss_scale = loss_scales[seed % 3];
        const Reference ref = reference_for(pr, p);
        for (const BlockChoice& blocks : kBlockChoices) {
          set_blocks(p, blocks);
          check_against_reference(pr, p, ref, 5e-6, 5e-6, seen, describe(p));
        }
      }
    }
  }
  seen.print("fp32 vs double reference");
}

// Post-training's loss: per-row weights (negative, zero and positive, as policy gradients and
// loss masks give) and a sampling temperature, with and without the cap, several row blocks;
// the same bounds as the plain loss. The per-token losses stay unweighted.
TEST(FusedLinearCrossEntropy, WeightedTemperedLossMatchesReference) {
  Observed seen;
  uint32_t seed = 900;
  for (float temperature : {0.6f, 1.0f, 1.7f}) {
    for (float softcap : {30.0f, 0.0f}) {
      for (int64_t T : {5, 131}) {
        ++seed;
        const Problem pr = make_problem(T, 24, 1000, seed % 2 == 0 ? 20.0f : 1.0f, seed);
        std::mt19937 rng(seed);
        std::uniform_real_distribution<float> u(-2.0f, 2.0f);
        std::vector<float> weights(static_cast<size_t>(T));
        for (auto& w : weights) w = u(rng);
        weights[1] = 0.0f;  // a masked token
        FusedLossParams p = pr.params();
        p.softcap = softcap;
        p.row_weights = weights.data();
        p.temperature = temperature;
        p.loss_scale = 0.37f;
        const Reference ref = reference_for(pr, p);
        for (const BlockChoice& blocks : kBlockChoices) {
          set_blocks(p, blocks);
          check_against_reference(pr, p, ref, 5e-6, 5e-6, seen,
                                  describe(p) + " temperature=" + std::to_string(temperature) +
                                      " softcap=" + std::to_string(softcap));
        }
        // Each row's entropy of softmax(y/τ): a sum of V terms of size up to ~log V.
        std::vector<float> entropy(static_cast<size_t>(T), kNan);
        p.entropy = entropy.data();
        p.row_block = 64;
        fused_linear_cross_entropy_forward(p, nullptr);
        for (int64_t t = 0; t < T; ++t) {
          EXPECT_NEAR(entropy[static_cast<size_t>(t)], ref.entropy[static_cast<size_t>(t)],
                      1e-5 * (1.0 + ref.entropy[static_cast<size_t>(t)]))
              << "t=" << t << " temperature=" << temperature << " softcap=" << softcap;
        }
      }
    }
  }
  seen.print("weighted, tempered vs double reference");
}

// Weights of 1 and temperature 1 are the plain loss bit for bit (training's loss is unchanged
// by the post-training options), and a weight of 0 leaves its row's gradient contribution out.
TEST(FusedLinearCrossEntropy, UnitWeightsAreThePlainLossBitwise) {
  const int64_t T = 77;
  const Problem pr = make_problem(T, 32, 700, 20.0f, 17);
  for (Precision precision : {Precision::kFp32, Precision::kBf16}) {
    FusedLossParams plain = pr.params();
    plain.precision = precision;
    plain.row_block = 20;
    std::vector<float> ones(static_cast<size_t>(T), 1.0f);
    FusedLossParams weighted = plain;
    weighted.row_weights = ones.data();
    const Outputs a = run_fused(pr, plain, 0.1, 5);
    const Outputs b = run_fused(pr, weighted, 0.1, 5);
    EXPECT_EQ(a.forward_total, b.forward_total);
    EXPECT_EQ(0, std::memcmp(a.dx.data(), b.dx.data(), a.dx.size() * sizeof(float)));
    EXPECT_EQ(0, std::memcmp(a.dW.data(), b.dW.data(), a.dW.size() * sizeof(float)));
    EXPECT_EQ(0, std::memcmp(a.per_token.data(), b.per_token.data(), T * sizeof(float)));
    // Zero the weight of row 3: dx's row 3 is zero, the others unchanged.
    ones[3] = 0.0f;
    const Outputs c = run_fused(pr, weighted, 0.1, 5);
    for (int64_t t = 0; t < T; ++t) {
      for (int64_t e = 0; e < pr.d; ++e) {
        const size_t i = static_cast<size_t>(t * pr.d + e);
        if (t == 3) {
          EXPECT_EQ(c.dx[i], 0.0f);
        } else {
          EXPECT_EQ(c.dx[i], a.dx[i]) << t << "," << e;
        }
      }
    }
    EXPECT_NEAR(c.forward_total, a.forward_total - a.per_token[3], 1e-3);
  }
}

// The AVX-512 row loops (kernels/loss_rows_avx512.hpp) against the loops compiled per ISA, bit
// for bit in every output where the build fuses multiply-adds (the exponential's note,
// kernels/exp_approx_avx512.hpp): capped and plain, tempered and weighted, bf16 and fp32 gradients,
// a vocabulary that ends inside a vector, targets at both ends. (FP8 gradients keep the cloned
// loop.)
TEST(FusedLinearCrossEntropy, Avx512RowLoopsGiveTheClonedLoopsBits) {
  if (!cpu_info().avx512f || !cpu_info().avx512bw || !cpu_info().avx512vl) {
    GTEST_SKIP() << "no AVX-512BW/VL: the cloned loops are what runs";
  }
  const int64_t T = 45;
  const Problem pr = make_problem(T, 32, 1003, 20.0f, 23);
  std::vector<float> weights(static_cast<size_t>(T));
  for (int64_t t = 0; t < T; ++t)
    weights[static_cast<size_t>(t)] = 0.25f * static_cast<float>(t % 7) - 0.5f;
  for (Precision precision : {Precision::kBf16, Precision::kFp32}) {
    for (float softcap : {30.0f, 0.0f}) {
      for (float temperature : {1.0f, 0.7f}) {
        FusedLossParams p = pr.params();
        p.precision = precision;
        p.softcap = softcap;
        p.temperature = temperature;
        p.row_weights = temperature == 1.0f ? nullptr : weights.data();
        p.row_block = 16;
        const bool previous = set_loss_rows_avx512(false);
        const Outputs cloned = run_fused(pr, p, 0.1, 9);
        set_loss_rows_avx512(true);
        const Outputs avx512 = run_fused(pr, p, 0.1, 9);
        set_loss_rows_avx512(previous);
        const std::string label = std::string(precision == Precision::kBf16 ? "bf16" : "fp32") +
                                  " softcap " + std::to_string(softcap) + " temperature " +
                                  std::to_string(temperature);
        if (test::build_fuses_multiply_add()) {
          EXPECT_EQ(cloned.forward_total, avx512.forward_total) << label;
          EXPECT_EQ(cloned.backward_total, avx512.backward_total) << label;
          EXPECT_EQ(0, std::memcmp(cloned.per_token.data(), avx512.per_token.data(),
                                   cloned.per_token.size() * sizeof(float)))
              << label;
          EXPECT_EQ(
              0, std::memcmp(cloned.dx.data(), avx512.dx.data(), cloned.dx.size() * sizeof(float)))
              << label;
          EXPECT_EQ(
              0, std::memcmp(cloned.dW.data(), avx512.dW.data(), cloned.dW.size() * sizeof(float)))
              << label;
        } else {
          // Where the build fuses no multiply-add (-O1), the cloned loops fuse none and the
          // exponentials differ in the last bits (kernels/exp_approx_avx512.hpp); a bf16 gradient
          // may then round the other way. Held to that.
          EXPECT_NEAR(cloned.forward_total, avx512.forward_total,
                      1e-5 * std::abs(cloned.forward_total))
              << label;
          for (const auto& [a, b] :
               {std::pair{&cloned.dx, &avx512.dx}, std::pair{&cloned.dW, &avx512.dW},
                std::pair{&cloned.per_token, &avx512.per_token}}) {
            float scale = 0.0f, worst = 0.0f;
            for (size_t i = 0; i < a->size(); ++i) {
              scale = std::max(scale, std::abs((*a)[i]));
              worst = std::max(worst, std::abs((*a)[i] - (*b)[i]));
            }
            EXPECT_LE(worst, 1e-3f * scale) << label;
          }
        }
      }
    }
  }
}

TEST(FusedLinearCrossEntropy, RejectsBadTemperatureAndWeights) {
  const Problem pr = make_problem(4, 8, 16, 1.0f, 3);
  FusedLossParams p = pr.params();
  p.temperature = 0.0f;
  EXPECT_THROW(fused_linear_cross_entropy_forward(p, nullptr), Error);
  p.temperature = std::numeric_limits<float>::infinity();
  EXPECT_THROW(fused_linear_cross_entropy_forward(p, nullptr), Error);
  p.temperature = 1.0f;
  std::vector<float> weights = {1.0f, kNan, 1.0f, 1.0f};
  p.row_weights = weights.data();
  EXPECT_THROW(fused_linear_cross_entropy_forward(p, nullptr), Error);
  std::vector<float> logits(4 * 16);
  p.row_weights = nullptr;
  p.temperature = 0.5f;
  EXPECT_THROW(capped_logits(p, logits.data()), Error);
}

TEST(FusedLinearCrossEntropy, Fp8MatchesExplicitRounding) {
  // The inputs round identically in the kernel and the reference; only the fp32 accumulation
  // differs. That difference can move a gradient element across an E5M2 rounding boundary
  // (a 25% step on that one element), which is why the gradient bound is looser than fp32's.
  Observed seen;
  double fp8_vs_exact = std::numeric_limits<double>::infinity();
  uint32_t seed = 200;
  for (int64_t T : {7, 129, 300}) {
    for (int64_t d : {24, 64}) {
      for (int64_t V : {384, 1000}) {
        ++seed;
        const Problem pr = make_problem(T, d, V, seed % 2 == 0 ? 20.0f : 1.0f, seed);
        FusedLossParams p = pr.params();
        p.loss_scale = 1.0f / static_cast<float>(T);
        p.fp8 = true;
        const Reference ref = reference_for(pr, p);
        for (const BlockChoice& blocks : kBlockChoices) {
          set_blocks(p, blocks);
          check_against_reference(pr, p, ref, 5e-6, 5e-4, seen, describe(p));
        }
        // The rounding really happens: the exact head's gradient is measurably different.
        FusedLossParams exact = p;
        exact.fp8 = false;
        const Reference ref_exact = reference_for(pr, exact);
        std::vector<float> dW(static_cast<size_t>(V * d), 0.0f);
        fused_linear_cross_entropy_backward(p, nullptr, dW.data());
        fp8_vs_exact = std::min(fp8_vs_exact, relative_error(dW, ref_exact.dW));
      }
    }
  }
  EXPECT_GT(fp8_vs_exact, 1e-2);
  seen.print("fp8 vs double reference with explicit rounding");
  std::printf("[   info   ] smallest ‖dW_fp8 - dW_exact‖/‖dW_exact‖: %.2e\n", fp8_vs_exact);
}

TEST(FusedLinearCrossEntropy, WithoutSoftcapIsPlainCrossEntropy) {
  // Logits of several hundred: exp overflows fp32 unless the running max is subtracted.
  Observed seen;
  const Problem pr = make_problem(129, 24, 1000, 40.0f, 300);
  FusedLossParams p = pr.params();
  p.softcap = 0.0f;
  p.loss_scale = 0.5f;
  const Reference ref = reference_for(pr, p);
  for (const BlockChoice& blocks : kBlockChoices) {
    set_blocks(p, blocks);
    check_against_reference(pr, p, ref, 5e-6, 5e-6, seen, describe(p));
  }
  seen.print("no soft-cap vs double reference");
}

TEST(FusedLinearCrossEntropy, Bf16MatchesRoundedInputs) {
  // The reference rounds x and W to bf16 as the products do, so the logits and the loss are as
  // exact as in fp32 (the bound is fp32's). The gradient's products also round dL/dz to bf16,
  // a relative error up to 2^-9 ≈ 2e-3 per element that the reference does not model. With a
  // flat softmax a row's non-target elements are nearly equal, so their rounding errors share
  // sign and size and the norms' errors approach 2^-9 (1.7e-3 seen); the bound is 5e-3.
  Observed seen;
  uint32_t seed = 250;
  for (int64_t T : {1, 7, 129, 300}) {
    for (int64_t V : {384, 2053}) {
      ++seed;
      const Problem pr = make_problem(T, 64, V, seed % 2 == 0 ? 20.0f : 1.0f, seed);
      FusedLossParams p = pr.params();
      p.precision = Precision::kBf16;
      p.loss_scale = seed % 2 == 0 ? 0.37f : 1.0f / static_cast<float>(T);
      const Reference ref = reference_for(pr, p);
      for (const BlockChoice& blocks : kBlockChoices) {
        set_blocks(p, blocks);
        check_against_reference(pr, p, ref, 5e-6, 5e-3, seen, describe(p));
      }
    }
  }
  seen.print("bf16 vs double reference with bf16 inputs");
}

TEST(FusedLinearCrossEntropy, BitwiseIdenticalAcrossThreadCounts) {
  const Problem pr = make_problem(300, 64, 2053, 20.0f, 400);
  ThreadPool one(1), two(2), three(3);
  enum Mode { kFp32, kFp8, kBf16 };
  for (Mode mode : {kFp32, kFp8, kBf16}) {
    for (const BlockChoice& blocks : kBlockChoices) {
      FusedLossParams p = pr.params();
      p.fp8 = mode == kFp8;
      p.precision = mode == kBf16 ? Precision::kBf16 : Precision::kFp32;
      p.loss_scale = 1.0f / 300;
      set_blocks(p, blocks);
      std::vector<Outputs> runs;
      for (ThreadPool* pool : {&one, &two, &three}) {
        ThreadPool::Use use(*pool);
        runs.push_back(run_fused(pr, p, 1e-3, 1));
      }
      for (size_t i = 1; i < runs.size(); ++i) {
        const std::string label = describe(p) + " threads " + std::to_string(i + 1);
        EXPECT_EQ(runs[i].forward_total, runs[0].forward_total) << label;
        EXPECT_EQ(runs[i].backward_total, runs[0].backward_total) << label;
        EXPECT_EQ(0, std::memcmp(runs[i].per_token.data(), runs[0].per_token.data(),
                                 runs[0].per_token.size() * sizeof(float)))
            << label;
        EXPECT_EQ(
            0, std::memcmp(runs[i].dx.data(), runs[0].dx.data(), runs[0].dx.size() * sizeof(float)))
            << label;
        EXPECT_EQ(
            0, std::memcmp(runs[i].dW.data(), runs[0].dW.data(), runs[0].dW.size() * sizeof(float)))
            << label;
      }
    }
  }
}

TEST(FusedLinearCrossEntropy, KeepsItsBuffersInTheWorkspaceInScope) {
  const Problem pr = make_problem(300, 64, 2053, 20.0f, 401);
  for (Precision precision : {Precision::kFp32, Precision::kBf16}) {
    FusedLossParams p = pr.params();
    p.precision = precision;
    p.row_block = 100;  // products under the autotuner's threshold: no timing runs
    const std::string label = describe(p);
    const Outputs in_default = run_fused(pr, p, 1e-3, 1);
    Workspace ws("fused loss test");
    {
      Workspace::Use use(ws);
      const Outputs first = run_fused(pr, p, 1e-3, 1);
      const size_t held = ws.bytes_held();
      // The logits (and bf16 gradients) of a block, plus the GEMM's scratch.
      EXPECT_GE(held, fused_linear_cross_entropy_workspace_bytes(p) -
                          static_cast<size_t>(p.row_block) * sizeof(double))
          << label;
      const Outputs again = run_fused(pr, p, 1e-3, 1);
      EXPECT_EQ(ws.bytes_held(), held) << label;
      EXPECT_EQ(ws.peak_bytes(), held) << label;
      for (const Outputs* o : {&first, &again}) {
        EXPECT_EQ(o->backward_total, in_default.backward_total) << label;
        EXPECT_EQ(0, std::memcmp(o->dx.data(), in_default.dx.data(),
                                 in_default.dx.size() * sizeof(float)))
            << label;
        EXPECT_EQ(0, std::memcmp(o->dW.data(), in_default.dW.data(),
                                 in_default.dW.size() * sizeof(float)))
            << label;
      }
    }
    ws.release();
    EXPECT_EQ(ws.bytes_held(), 0u) << label;
  }
}

TEST(FusedLinearCrossEntropy, BackwardLossEqualsForwardAndGradientsAreSeparable) {
  for (bool fp8 : {false, true}) {
    const Problem pr = make_problem(129, 24, 1000, 20.0f, fp8 ? 501 : 500);
    FusedLossParams p = pr.params();
    p.fp8 = fp8;
    p.row_block = 64;
    std::vector<float> per_token(129);
    const double forward = fused_linear_cross_entropy_forward(p, per_token.data());
    EXPECT_EQ(fused_linear_cross_entropy_forward(p, nullptr), forward);
    std::vector<float> dx(129 * 24, kNan), dW(1000 * 24, 0.0f);
    EXPECT_EQ(fused_linear_cross_entropy_backward(p, dx.data(), dW.data()), forward);
    // Asking for one gradient computes it exactly as when both are asked for.
    std::vector<float> dx_only(dx.size(), kNan), dW_only(dW.size(), 0.0f);
    EXPECT_EQ(fused_linear_cross_entropy_backward(p, dx_only.data(), nullptr), forward);
    EXPECT_EQ(fused_linear_cross_entropy_backward(p, nullptr, dW_only.data()), forward);
    EXPECT_EQ(dx_only, dx);
    EXPECT_EQ(dW_only, dW);
    // A second call adds the same gradient again. With one row block each element gets a
    // single product per call, so the sum is exactly twice the first call's.
    FusedLossParams one_block = p;
    one_block.row_block = 129;
    std::vector<float> dW_twice(dW.size(), 0.0f);
    fused_linear_cross_entropy_backward(one_block, nullptr, dW_twice.data());
    const std::vector<float> dW_once = dW_twice;
    fused_linear_cross_entropy_backward(one_block, nullptr, dW_twice.data());
    for (size_t i = 0; i < dW.size(); ++i) ASSERT_EQ(dW_twice[i], 2.0f * dW_once[i]) << i;
  }
}

TEST(FusedLinearCrossEntropy, DxOverSeveralRowBlocksGivesTheBitsOfOneBlock) {
  // Over several row blocks the head packs W for dx once and every block's product reads that
  // copy; in one block the product packs W itself. A row of dx is one product over its row of g
  // either way, so the two agree bit for bit, as do the losses.
  uint32_t seed = 900;
  for (Precision precision : {Precision::kFp32, Precision::kBf16}) {
    for (bool fp8 : {false, true}) {
      const Problem pr = make_problem(300, 64, 1000, 20.0f, ++seed);
      FusedLossParams p = pr.params();
      p.precision = precision;
      p.fp8 = fp8;
      p.loss_scale = 1.0f / 300;
      p.row_block = 300;
      std::vector<float> one_block(300 * 64, kNan);
      const double loss = fused_linear_cross_entropy_backward(p, one_block.data(), nullptr);
      for (float v : one_block) ASSERT_TRUE(std::isfinite(v));
      for (int64_t row_block : {64, 7, 1}) {
        p.row_block = row_block;
        const std::string label = describe(p);
        std::vector<float> dx(one_block.size(), kNan);
        EXPECT_EQ(fused_linear_cross_entropy_backward(p, dx.data(), nullptr), loss) << label;
        EXPECT_EQ(dx, one_block) << label;
      }
    }
  }
}

TEST(FusedLinearCrossEntropy, KeptBuffersGiveTheBitsOfTheCallsOwn) {
  // One FusedLossBuffers through calls of other sizes and other weights, as a model keeps it
  // from step to step: each call fills it again (packed W for the logits and for dx, with fp8
  // the rounded W and x), so each gives the bits of a call with memory of its own. Two calls of
  // one shape with different W and x catch a copy left over from the call before.
  struct Call {
    int64_t T, d, V;
    uint32_t seed;
  };
  const Call calls[] = {
      {300, 64, 1000, 1}, {300, 64, 1000, 2}, {129, 24, 384, 3}, {300, 64, 1000, 4}};
  for (Precision precision : {Precision::kFp32, Precision::kBf16}) {
    for (bool fp8 : {false, true}) {
      FusedLossBuffers kept;
      for (const Call& call : calls) {
        const Problem pr = make_problem(call.T, call.d, call.V, 20.0f, 1000 + call.seed);
        FusedLossParams p = pr.params();
        p.precision = precision;
        p.fp8 = fp8;
        p.loss_scale = 1.0f / static_cast<float>(call.T);
        p.row_block = 64;  // several row blocks: dx reads W packed by the call
        const std::string label = describe(p) + " seed " + std::to_string(call.seed);
        const Outputs own = run_fused(pr, p, 1e-3, call.seed);
        p.buffers = &kept;
        const Outputs with_kept = run_fused(pr, p, 1e-3, call.seed);
        EXPECT_EQ(with_kept.per_token, own.per_token) << label;
        EXPECT_EQ(with_kept.forward_total, own.forward_total) << label;
        EXPECT_EQ(with_kept.backward_total, own.backward_total) << label;
        EXPECT_EQ(with_kept.dx, own.dx) << label;
        EXPECT_EQ(with_kept.dW, own.dW) << label;
        for (float v : own.dx) ASSERT_TRUE(std::isfinite(v)) << label;
        // The copies were made in the kept buffers, not in memory of the call's own.
        EXPECT_GE(kept.logits_w.bytes(), static_cast<size_t>(call.V * call.d) * 2) << label;
        EXPECT_GE(kept.dx_w.bytes(), static_cast<size_t>(call.V * call.d) * 2) << label;
        EXPECT_EQ(kept.w_e4m3.capacity() > 0, fp8) << label;
      }
    }
  }
}

TEST(FusedLinearCrossEntropy, UnfusedAgreesWithFused) {
  Observed seen;
  for (bool fp8 : {false, true}) {
    const Problem pr = make_problem(300, 64, 1000, 20.0f, fp8 ? 601 : 600);
    FusedLossParams p = pr.params();
    p.fp8 = fp8;
    p.loss_scale = 1.0f / 300;
    const Reference ref = reference_for(pr, p);
    std::vector<float> dx(300 * 64, kNan), dW(1000 * 64, 0.0f);
    const double loss = linear_cross_entropy_unfused(p, dx.data(), dW.data());
    const double loss_err = std::abs(loss - ref.total) / (300 + ref.total);
    EXPECT_LT(loss_err, 5e-6);
    seen.loss = std::max(seen.loss, loss_err);
    EXPECT_EQ(linear_cross_entropy_unfused(p, nullptr, nullptr), loss);
    const double dx_err = relative_error(dx, ref.dx), dW_err = relative_error(dW, ref.dW);
    EXPECT_LT(dx_err, fp8 ? 5e-4 : 5e-6);
    EXPECT_LT(dW_err, fp8 ? 5e-4 : 5e-6);
    seen.dx = std::max(seen.dx, dx_err);
    seen.dW = std::max(seen.dW, dW_err);
    // With T in one row block (the default here) the fused head does the unfused head's row
    // work and products on the same shapes, only with a padded row stride and without the
    // second T×V buffer; the GEMM's sums do not depend on the stride, so the results agree bit
    // for bit.
    const Outputs fused = run_fused(pr, p, 0.0, 1);
    ASSERT_EQ(fused_linear_cross_entropy_row_block(p), 300);
    EXPECT_EQ(fused.forward_total, loss);
    EXPECT_EQ(fused.backward_total, loss);
    EXPECT_EQ(fused.dx, dx);
    EXPECT_EQ(fused.dW, dW);
  }
  seen.print("unfused vs double reference (fp32 and fp8)");
}

TEST(FusedLinearCrossEntropy, CappedLogitsMatchReference) {
  const Problem pr = make_problem(7, 64, 1000, 20.0f, 700);
  FusedLossParams p = pr.params();
  p.targets = nullptr;  // sampling has no targets
  std::vector<float> out(7 * 1000, kNan);
  capped_logits(p, out.data());
  const double divisor = 7.5 * 8.0;
  double worst = 0;
  for (int64_t t = 0; t < 7; ++t) {
    for (int64_t j = 0; j < 1000; ++j) {
      double z = 0;
      for (int64_t k = 0; k < 64; ++k) {
        z += double(pr.x[static_cast<size_t>(t * 64 + k)]) * pr.W[static_cast<size_t>(j * 64 + k)];
      }
      const double y = 30.0 / (1.0 + std::exp(-z / divisor));
      worst = std::max(worst, std::abs(out[static_cast<size_t>(t * 1000 + j)] - y));
    }
  }
  EXPECT_LT(worst, 2e-5);  // absolute, on values in (0, 30)
  std::printf("[   info   ] capped logits: max absolute error %.2e\n", worst);
}

TEST(FusedLinearCrossEntropy, NanInputGivesNanLoss) {
  // A diverged activation must surface as a NaN loss, not be skipped by the max or the exp.
  Problem pr = make_problem(7, 8, 128, 1.0f, 900);
  pr.x[3 * 8 + 2] = kNan;
  FusedLossParams p = pr.params();
  std::vector<float> per_token(7);
  EXPECT_TRUE(std::isnan(fused_linear_cross_entropy_forward(p, per_token.data())));
  EXPECT_TRUE(std::isnan(per_token[3]));
  EXPECT_TRUE(std::isfinite(per_token[2]));
  EXPECT_TRUE(std::isnan(linear_cross_entropy_unfused(p, nullptr, nullptr)));
}

TEST(FusedLinearCrossEntropy, RowBlockKeepsTheWorkspaceBounded) {
  FusedLossParams p;
  p.d = 256;
  auto rows = [&](int64_t T, int64_t V, int64_t forced = 0) {
    p.T = T;
    p.V = V;
    p.row_block = forced;
    return fused_linear_cross_entropy_row_block(p);
  };
  // fp32 gradients: rows of V = 8192 are padded to 8208 floats, so 4088 of them fill 128 MiB.
  EXPECT_EQ(rows(512, 8192), 512);  // one block, 16 MiB
  EXPECT_EQ(rows(4088, 8192), 4088);
  EXPECT_EQ(rows(4089, 8192), 2045);  // two equal blocks, not 4088 + 1
  // 128 MiB holds only 666 rows of V = 50304, fewer than kMinLossRowBlock: the bound is raised
  // to hold 1024 rows (of 50320 floats, 206 MB).
  EXPECT_EQ(rows(2048, 50304), 1024);
  EXPECT_EQ(rows(8192, 50304), 1024);
  EXPECT_EQ(rows(16384, 50304), 1024);  // the speedrun: 16 blocks
  EXPECT_EQ(rows(1025, 50304), 513);
  EXPECT_EQ(rows(7, 50304), 7);  // never more rows than T
  // Rows so long that 1024 of them pass kMaxRaisedWorkspaceBytes: as many as fit it.
  // 512 MiB / (1048592 · 4 bytes) = 127.99 → 127 rows fit, so ⌈4096 / 127⌉ = 33 blocks of 125.
  EXPECT_EQ(rows(4096, 1 << 20), 125);
  EXPECT_EQ(rows(3, int64_t{1} << 30), 1);  // a row larger than the bound: one row at a time
  EXPECT_EQ(rows(300, 1000, 64), 64);       // forced
  EXPECT_EQ(rows(30, 1000, 64), 30);        // forced, but at most T
  EXPECT_EQ(rows(0, 1000), 0);
  // bf16 gradients take half the bytes: 8176 rows of V = 8192, 1333 of V = 50304.
  p.precision = Precision::kBf16;
  EXPECT_EQ(rows(8176, 8192), 8176);
  EXPECT_EQ(rows(8192, 8192), 4096);
  EXPECT_EQ(rows(8192, 50304), 1171);  // ⌈8192 / 1333⌉ = 7 blocks
  for (Precision precision : {Precision::kFp32, Precision::kBf16}) {
    p.precision = precision;
    const int64_t value_bytes = precision == Precision::kBf16 ? 2 : 4;
    for (int64_t T : {1, 100, 513, 4096, 16384, 100000}) {
      for (int64_t V : {13, 1000, 8192, 50304, 200000}) {
        p.T = T;
        p.V = V;
        p.row_block = 0;
        p.logit_rows = 0;
        p.fp8 = false;
        const std::string label = "T=" + std::to_string(T) + " V=" + std::to_string(V) + " " +
                                  (precision == Precision::kBf16 ? "bf16" : "fp32");
        const int64_t r = fused_linear_cross_entropy_row_block(p);
        const int64_t lr = fused_linear_cross_entropy_logit_rows(p);
        // The workspace: lr rows of ld fp32 logits and r rows of ld gradients, ld >= V a whole
        // and odd number of 64-byte lines; the rows' losses and two kept rows per thread
        // besides.
        const auto bytes = static_cast<int64_t>(fused_linear_cross_entropy_workspace_bytes(p));
        const int64_t rows_bytes = bytes - r * 8 - ThreadPool::current().size() * 2 * V * 4;
        ASSERT_EQ(rows_bytes % (lr * 4 + r * value_bytes), 0) << label;
        const int64_t ld = rows_bytes / (lr * 4 + r * value_bytes);
        EXPECT_GE(ld, V) << label;
        EXPECT_LT(ld, V + 32) << label;
        EXPECT_EQ(ld % 32, 16) << label;
        // The bound: 128 MiB, or enough for kMinLossRowBlock rows, but never over 512 MiB.
        const int64_t bound = fused_linear_cross_entropy_workspace_bound(p);
        EXPECT_EQ(bound, std::clamp(kMinLossRowBlock * ld * value_bytes, kMaxGradientBlockBytes,
                                    kMaxRaisedWorkspaceBytes))
            << label;
        EXPECT_LE(r * ld * value_bytes, bound) << label;
        // In the fewest blocks that fit, none of them empty.
        const int64_t max_rows = bound / (ld * value_bytes);
        const int64_t blocks = (T + r - 1) / r;
        EXPECT_EQ(blocks, (T + max_rows - 1) / max_rows) << label;
        EXPECT_LT((blocks - 1) * r, T) << label;
        if (kMinLossRowBlock * ld * value_bytes <= kMaxRaisedWorkspaceBytes) {
          // No more blocks than blocks of kMinLossRowBlock rows would make.
          EXPECT_LE(blocks, (T + kMinLossRowBlock - 1) / kMinLossRowBlock) << label;
        }
        // Logits blocks: within the gradient block, and as many rows as fit kLogitsBlockBytes,
        // or the minimum for W's size, whichever is more. A streamed W is read by at least as
        // many rows as make its bytes half their logits' (d = 256 rows in bf16, 512 in fp32).
        const bool streamed = V * 256 * value_bytes > kCachedWeightBytes;
        const int64_t share = (2 * V * 256 * value_bytes + ld * 4 - 1) / (ld * 4);
        if (streamed) {
          EXPECT_EQ(share, 256 * value_bytes / 2) << label;
        }
        const int64_t least =
            streamed ? std::max(kMinStreamedWeightLogitRows, share) : kMinLogitRows;
        EXPECT_EQ(lr, std::min(r, std::max(least, kLogitsBlockBytes / (ld * 4)))) << label;
        p.fp8 = true;
        EXPECT_EQ(static_cast<int64_t>(fused_linear_cross_entropy_workspace_bytes(p)),
                  bytes + (V * 256 + r * 256) * 4)
            << label;
      }
    }
  }
  p.precision = Precision::kFp32;
  p.fp8 = false;
  p.T = 700;
  p.V = 1000;
  p.row_block = 0;
  p.logit_rows = 50;
  EXPECT_EQ(fused_linear_cross_entropy_logit_rows(p), 50);  // forced
  p.row_block = 40;
  EXPECT_EQ(fused_linear_cross_entropy_logit_rows(p), 40);  // forced, but within the block
}

// The logits are taken in blocks sized for the cache whether W comes packed or not, with the
// same bits as in one block (the packed operand fixes the product's blocking, and each row's
// loss is its own), forward and backward.
TEST(FusedLinearCrossEntropy, LogitsBlocksSizedForTheCacheGiveTheBitsOfOneBlock) {
  for (Precision precision : {Precision::kFp32, Precision::kBf16}) {
    SCOPED_TRACE(precision == Precision::kBf16 ? "bf16" : "fp32");
    const Problem pr = make_problem(700, 64, 8192, 20.0f, 31);
    FusedLossParams p = pr.params();
    p.precision = precision;
    p.loss_scale = 1.0f / 700;
    EXPECT_EQ(fused_linear_cross_entropy_row_block(p), 700) << "one gradient block";
    // Rows of 8208 floats against 2 MiB: 63 rows (before rounding to whole tiles).
    EXPECT_EQ(fused_linear_cross_entropy_logit_rows(p), 63);
    const Outputs blocked = run_fused(pr, p, 1e-3, 7);
    PackedB packed;
    pack_matmul_b(precision, Trans::kYes, p.d, p.V, p.W, p.d, packed);
    p.W_packed = &packed;
    const Outputs given = run_fused(pr, p, 1e-3, 7);
    p.logit_rows = 700;
    const Outputs whole = run_fused(pr, p, 1e-3, 7);
    for (const Outputs* o : {&given, &whole}) {
      EXPECT_EQ(o->per_token, blocked.per_token);
      EXPECT_EQ(o->forward_total, blocked.forward_total);
      EXPECT_EQ(o->backward_total, blocked.forward_total);
      EXPECT_EQ(o->dx, blocked.dx);
      EXPECT_EQ(o->dW, blocked.dW);
    }
    for (float l : blocked.per_token) ASSERT_TRUE(std::isfinite(l) && l > 0.0f);
    p.logit_rows = 0;
    p.T = 20;
    EXPECT_EQ(fused_linear_cross_entropy_logit_rows(p), 20) << "never more than T";
    p.T = 700;
    // Rows of 4 MiB, and a W of 128 or 256 MiB: the streamed minimum holds, within gradient
    // blocks of 234 (bf16) or 117 (fp32) rows.
    p.V = 1 << 20;
    const int64_t block = fused_linear_cross_entropy_row_block(p);
    EXPECT_EQ(block, precision == Precision::kBf16 ? 234 : 117);
    EXPECT_EQ(fused_linear_cross_entropy_logit_rows(p),
              std::min(block, kMinStreamedWeightLogitRows));
    p.d = 8;  // a W of 16 or 32 MiB
    EXPECT_EQ(fused_linear_cross_entropy_logit_rows(p),
              precision == Precision::kBf16 ? kMinLogitRows : block);
  }
}

TEST(FusedLinearCrossEntropy, RejectsBadArgumentsAndHandlesNoRows) {
  Problem pr = make_problem(7, 8, 128, 1.0f, 800);
  std::vector<float> dx(7 * 8), dW(128 * 8, 1.0f);
  FusedLossParams p = pr.params();
  pr.targets[3] = 128;
  EXPECT_THROW(fused_linear_cross_entropy_forward(p, nullptr), Error);
  pr.targets[3] = -1;
  EXPECT_THROW(fused_linear_cross_entropy_backward(p, dx.data(), dW.data()), Error);
  EXPECT_THROW(linear_cross_entropy_unfused(p, dx.data(), dW.data()), Error);
  pr.targets[3] = 5;
  FusedLossParams bad = p;
  bad.targets = nullptr;
  EXPECT_THROW(fused_linear_cross_entropy_forward(bad, nullptr), Error);
  bad = p;
  bad.row_block = -1;
  EXPECT_THROW(fused_linear_cross_entropy_forward(bad, nullptr), Error);
  bad = p;
  bad.fp8 = true;
  bad.grad_scale = 0.0f;
  EXPECT_THROW(fused_linear_cross_entropy_backward(bad, dx.data(), dW.data()), Error);
  bad = p;
  bad.d = 0;
  EXPECT_THROW(fused_linear_cross_entropy_forward(bad, nullptr), Error);
  // No rows: no loss, and dW keeps its values.
  FusedLossParams empty = p;
  empty.T = 0;
  EXPECT_EQ(fused_linear_cross_entropy_backward(empty, nullptr, dW.data()), 0.0);
  for (float v : dW) ASSERT_EQ(v, 1.0f);
}

}  // namespace
}  // namespace nanogpt
