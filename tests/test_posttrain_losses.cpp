// The post-training losses of src/posttrain/ (issue 18, "Correctness"): hand-computed cases,
// gradients against central finite differences, the identities between estimators and
// aggregation modes (REINFORCE = GRPO at ratio 1, equal lengths, masks, micro-batches), the
// InputErrors, and a golden file from an independent PyTorch implementation
// (tools/golden/posttrain_losses_reference.py).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "posttrain/advantages.hpp"
#include "posttrain/dpo_loss.hpp"
#include "posttrain/loss_aggregation.hpp"
#include "posttrain/policy_gradient.hpp"
#include "posttrain/value_loss.hpp"
#include "runtime/error.hpp"
#include "runtime/file_io.hpp"
#include "support/fixtures.hpp"
#include "support/input_error.hpp"

namespace nanogpt {
namespace {

using Vec = std::vector<double>;

// Tolerances.
// Hand-computed cases: the numbers in the comments are exact decimal arithmetic or Python's
// math module; 1e-12 absolute covers the few roundings between them and the C++.
constexpr double kHandTol = 1e-12;
// Central differences in float64 with step 1e-6: truncation error ~h²·|ℓ'''| ≈ 1e-12, rounding
// ~ε·|L|/h ≈ 2e-10 for |L| ≈ 1, so 1e-8 absolute plus 1e-6 relative to the gradient.
constexpr double kFdStep = 1e-6;
constexpr double kFdAbsTol = 1e-8;
constexpr double kFdRelTol = 1e-6;
// Against PyTorch (float64 both sides, different orders of summation and exp/log1p
// implementations): 1e-13 relative to max(1, |expected|); the largest difference seen is 4e-15.
constexpr double kGoldenTol = 1e-13;

// A batch of sequences laid end to end, owning its arrays; view() gives the loss's spans.
struct Batch {
  std::vector<int64_t> offsets{0};
  std::vector<uint8_t> mask;
  Vec logp, logp_old, logp_ref, advantages;

  SequenceLayout layout() const { return {offsets, mask}; }
  PolicyTokens view() const { return {layout(), logp, logp_old, logp_ref, advantages}; }
  // The sequences [first, last) as a batch of their own (offsets rebased to 0).
  Batch slice(size_t first, size_t last) const {
    Batch b;
    const int64_t begin = offsets[first], end = offsets[last];
    for (size_t s = first + 1; s <= last; ++s) b.offsets.push_back(offsets[s] - begin);
    auto cut = [&](const auto& v) {
      using V = std::decay_t<decltype(v)>;
      return v.empty() ? V{} : V(v.begin() + begin, v.begin() + end);
    };
    b.mask = cut(mask);
    b.logp = cut(logp);
    b.logp_old = cut(logp_old);
    b.logp_ref = cut(logp_ref);
    b.advantages = cut(advantages);
    return b;
  }
};

// A normal draw at least 0.05 away from 0 (inputs are never zeros).
double nonzero_normal(std::mt19937_64& rng, double sd) {
  std::normal_distribution<double> normal(0.0, sd);
  for (;;) {
    const double x = normal(rng);
    if (std::abs(x) >= 0.05 * sd) return x;
  }
}

// Sequences of a masked prompt (1-3 tokens), `completion(s)` counted tokens, and sometimes
// masked padding; log-probabilities in [-4, -0.05], ratios exp(N(0, 0.3)) kept 1e-3 away from
// the clip points 1 ± ε (the kinks), advantages N(0, 1) away from 0.
Batch random_batch(std::mt19937_64& rng, int sequences, const std::function<int(int)>& completion,
                   double clip_low = 0.2, double clip_high = 0.28) {
  Batch b;
  std::uniform_int_distribution<int> prompt(1, 3), padding(0, 2);
  std::uniform_real_distribution<double> logp(-4.0, -0.05);
  std::normal_distribution<double> step(0.0, 0.3), ref(0.0, 0.2);
  for (int s = 0; s < sequences; ++s) {
    const int p = prompt(rng), c = completion(s), pad = padding(rng);
    for (int i = 0; i < p + c + pad; ++i) b.mask.push_back(i >= p && i < p + c);
    b.offsets.push_back(static_cast<int64_t>(b.mask.size()));
  }
  for (size_t t = 0; t < b.mask.size(); ++t) {
    const double old = logp(rng);
    double next;
    do {
      next = old + step(rng);
    } while (std::abs(std::exp(next - old) - (1 - clip_low)) < 1e-3 ||
             std::abs(std::exp(next - old) - (1 + clip_high)) < 1e-3);
    b.logp_old.push_back(old);
    b.logp.push_back(next);
    b.logp_ref.push_back(old + ref(rng));
    b.advantages.push_back(nonzero_normal(rng, 1.0));
  }
  return b;
}

std::function<int(int)> random_lengths(std::mt19937_64& rng, int lo = 3, int hi = 9) {
  return [&rng, lo, hi](int) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
}

// |got − want| within the finite-difference tolerance.
void expect_fd_close(double analytic, double fd, const std::string& what) {
  EXPECT_NEAR(analytic, fd, kFdAbsTol + kFdRelTol * std::abs(analytic)) << what;
}

// dL/dx[i] by central differences, for every i, L read from `loss` after writing x[i].
Vec central_differences(Vec& x, const std::function<double()>& loss) {
  Vec fd(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const double saved = x[i];
    x[i] = saved + kFdStep;
    const double up = loss();
    x[i] = saved - kFdStep;
    const double down = loss();
    x[i] = saved;
    fd[i] = (up - down) / (2 * kFdStep);
  }
  return fd;
}

// ---------------------------------------------------------------------------------------------
// DPO

// Two pairs, β = 0.1:
//   pair 0: πc = −10, rc = −12, πr = −15, rr = −14 → chosen log-ratio 2, rejected −1, h = 3
//   pair 1: πc = −20, rc = −19, πr = −9,  rr = −10 → chosen −1, rejected 1, h = −2
struct DpoHandPairs {
  Vec pc{-10, -20}, pr{-15, -9}, rc{-12, -19}, rr{-14, -10};
  DpoLogps logps() const { return {pc, pr, rc, rr}; }
};

TEST(DpoLoss, SigmoidByHand) {
  DpoHandPairs p;
  const DpoResult r = dpo_loss(p.logps(), {DpoLossKind::kSigmoid, 0.1});
  // ℓ0 = log(1 + e^−0.3) = 0.5543552444685271, ℓ1 = log(1 + e^0.2) = 0.7981388693815918.
  EXPECT_NEAR(r.loss, (0.5543552444685271 + 0.7981388693815918) / 2, kHandTol);
  // dℓ/dh = −β·σ(−βh): −0.1/(1 + e^0.3) = −0.0425557483188341, −0.1/(1 + e^−0.2) =
  // −0.0549833997312478; dL/dπc = dℓ/dh / 2, dL/dπr = −dℓ/dh / 2.
  EXPECT_NEAR(r.grad_policy_chosen[0], -0.0425557483188341 / 2, kHandTol);
  EXPECT_NEAR(r.grad_policy_chosen[1], -0.0549833997312478 / 2, kHandTol);
  EXPECT_NEAR(r.grad_policy_rejected[0], 0.0425557483188341 / 2, kHandTol);
  EXPECT_NEAR(r.grad_policy_rejected[1], 0.0549833997312478 / 2, kHandTol);
  // Rewards: chosen 0.1·2 = 0.2 and 0.1·−1 = −0.1 (mean 0.05); rejected −0.1 and 0.1 (mean 0);
  // margins 0.3 and −0.2 (mean 0.05); only pair 0 is ranked right.
  EXPECT_NEAR(r.reward_chosen, 0.05, kHandTol);
  EXPECT_NEAR(r.reward_rejected, 0.0, kHandTol);
  EXPECT_NEAR(r.reward_margin, 0.05, kHandTol);
  EXPECT_EQ(r.reward_accuracy, 0.5);
  EXPECT_EQ(r.pairs, 2);
}

TEST(DpoLoss, IpoByHand) {
  DpoHandPairs p;
  const DpoResult r = dpo_loss(p.logps(), {DpoLossKind::kIpo, 0.1});
  // 1/(2β) = 5: ℓ0 = (3 − 5)² = 4, ℓ1 = (−2 − 5)² = 49, mean 26.5; dℓ/dh = −4 and −14.
  EXPECT_NEAR(r.loss, 26.5, kHandTol);
  EXPECT_NEAR(r.grad_policy_chosen[0], -2.0, kHandTol);
  EXPECT_NEAR(r.grad_policy_chosen[1], -7.0, kHandTol);
  EXPECT_NEAR(r.grad_policy_rejected[0], 2.0, kHandTol);
  EXPECT_NEAR(r.grad_policy_rejected[1], 7.0, kHandTol);
}

TEST(DpoLoss, HingeByHand) {
  DpoHandPairs p;
  const DpoResult r = dpo_loss(p.logps(), {DpoLossKind::kHinge, 0.1});
  // ℓ0 = max(0, 1 − 0.3) = 0.7, ℓ1 = max(0, 1 + 0.2) = 1.2, mean 0.95; dℓ/dh = −β = −0.1 both.
  EXPECT_NEAR(r.loss, 0.95, kHandTol);
  EXPECT_NEAR(r.grad_policy_chosen[0], -0.05, kHandTol);
  EXPECT_NEAR(r.grad_policy_rejected[1], 0.05, kHandTol);
  // β = 0.5: βh = 1.5 ≥ 1 for pair 0, past the margin: no loss and no gradient; pair 1:
  // ℓ = 1 + 1 = 2. Mean 1.
  const DpoResult past = dpo_loss(p.logps(), {DpoLossKind::kHinge, 0.5});
  EXPECT_NEAR(past.loss, 1.0, kHandTol);
  EXPECT_EQ(past.grad_policy_chosen[0], 0.0);
  EXPECT_EQ(past.grad_policy_rejected[0], 0.0);
  EXPECT_NEAR(past.grad_policy_chosen[1], -0.25, kHandTol);
}

TEST(DpoLoss, SigmoidIsStableForLargeMargins) {
  // βh = ±1000: −log σ(1000) = log1p(e^−1000) = 0, and −log σ(−1000) = 1000 + log1p(e^−1000) =
  // 1000 where a naive log(1 + e^1000) is infinite. Mean 500; dℓ/dh = −0.1·σ(∓1000) = −0 and
  // −0.1, halved.
  const Vec pc{0.0, -10000.0}, pr{-10000.0, 0.0}, zero{0.0, 0.0};
  const DpoResult r = dpo_loss({pc, pr, zero, zero}, {DpoLossKind::kSigmoid, 0.1});
  EXPECT_EQ(r.loss, 500.0);
  EXPECT_EQ(r.grad_policy_chosen[0], -0.0);
  EXPECT_EQ(r.grad_policy_chosen[1], -0.05);
}

TEST(DpoLoss, GradientsMatchFiniteDifferences) {
  std::mt19937_64 rng(11);
  std::uniform_real_distribution<double> logp(-60.0, -5.0);
  std::normal_distribution<double> shift(0.0, 3.0);
  const int n = 9;
  Vec pc(n), pr(n), rc(n), rr(n);
  for (int i = 0; i < n; ++i) {
    pc[i] = logp(rng);
    pr[i] = logp(rng);
    rc[i] = pc[i] + shift(rng);
    rr[i] = pr[i] + shift(rng);
  }
  for (DpoLossKind kind : {DpoLossKind::kSigmoid, DpoLossKind::kIpo, DpoLossKind::kHinge}) {
    for (double beta : {0.1, 0.7}) {
      const DpoConfig config{kind, beta};
      auto loss = [&] { return dpo_loss({pc, pr, rc, rr}, config).loss; };
      const DpoResult r = dpo_loss({pc, pr, rc, rr}, config);
      const Vec fd_chosen = central_differences(pc, loss);
      const Vec fd_rejected = central_differences(pr, loss);
      int nonzero = 0;
      for (int i = 0; i < n; ++i) {
        // Away from the hinge's kink (βh = 1), where the two sides disagree.
        const double h = (pc[i] - rc[i]) - (pr[i] - rr[i]);
        ASSERT_GT(std::abs(beta * h - 1.0), 1e-3);
        const std::string what = std::string(dpo_loss_kind_name(kind)) +
                                 " beta=" + std::to_string(beta) + " pair " + std::to_string(i);
        expect_fd_close(r.grad_policy_chosen[i], fd_chosen[i], what + " chosen");
        expect_fd_close(r.grad_policy_rejected[i], fd_rejected[i], what + " rejected");
        nonzero += r.grad_policy_chosen[i] != 0;
      }
      EXPECT_GT(nonzero, 0) << dpo_loss_kind_name(kind);
    }
  }
}

TEST(DpoLoss, PartsWithTheBatchCountAddUpToTheBatch) {
  DpoHandPairs p;
  for (DpoLossKind kind : {DpoLossKind::kSigmoid, DpoLossKind::kIpo, DpoLossKind::kHinge}) {
    const DpoConfig config{kind, 0.1};
    const DpoResult whole = dpo_loss(p.logps(), config);
    for (size_t i = 0; i < 2; ++i) {
      const DpoLogps one{{&p.pc[i], 1}, {&p.pr[i], 1}, {&p.rc[i], 1}, {&p.rr[i], 1}};
      const DpoResult part = dpo_loss(one, config, 2);
      EXPECT_EQ(part.grad_policy_chosen[0], whole.grad_policy_chosen[i]);
      EXPECT_EQ(part.grad_policy_rejected[0], whole.grad_policy_rejected[i]);
    }
    const DpoLogps first{{&p.pc[0], 1}, {&p.pr[0], 1}, {&p.rc[0], 1}, {&p.rr[0], 1}};
    const DpoLogps second{{&p.pc[1], 1}, {&p.pr[1], 1}, {&p.rc[1], 1}, {&p.rr[1], 1}};
    EXPECT_NEAR(dpo_loss(first, config, 2).loss + dpo_loss(second, config, 2).loss, whole.loss,
                1e-15 * std::abs(whole.loss));
    // With its own count a part is a different (larger) loss: the count matters.
    EXPECT_NE(dpo_loss(first, config).grad_policy_chosen[0], whole.grad_policy_chosen[0]);
  }
}

TEST(DpoLoss, NamesAndErrors) {
  for (DpoLossKind kind : {DpoLossKind::kSigmoid, DpoLossKind::kIpo, DpoLossKind::kHinge}) {
    EXPECT_EQ(parse_dpo_loss_kind(dpo_loss_kind_name(kind)), kind);
  }
  const std::string bad = input_error([] { parse_dpo_loss_kind("logistic"); });
  EXPECT_NE(bad.find("'logistic'"), std::string::npos) << bad;
  EXPECT_NE(bad.find("\"sigmoid\", \"ipo\" or \"hinge\""), std::string::npos) << bad;

  DpoHandPairs p;
  for (double beta : {0.0, -0.1, std::nan("")}) {
    const std::string e = input_error([&] { dpo_loss(p.logps(), {DpoLossKind::kSigmoid, beta}); });
    EXPECT_NE(e.find("beta"), std::string::npos) << e;
    EXPECT_NE(e.find("> 0"), std::string::npos) << e;
  }
  const Vec short_rr{-14};
  const std::string len = input_error([&] { dpo_loss({p.pc, p.pr, p.rc, short_rr}, DpoConfig{}); });
  EXPECT_NE(len.find("reference_rejected has 1 entries but policy_chosen has 2"), std::string::npos)
      << len;
  const std::string count = input_error([&] { dpo_loss(p.logps(), DpoConfig{}, 1); });
  EXPECT_NE(count.find("batch_pairs = 1"), std::string::npos) << count;
  const Vec inf_pc{-10, -INFINITY};
  const std::string inf = input_error([&] { dpo_loss({inf_pc, p.pr, p.rc, p.rr}, DpoConfig{}); });
  EXPECT_NE(inf.find("policy_chosen[1]"), std::string::npos) << inf;
}

// ---------------------------------------------------------------------------------------------
// Advantages

TEST(PolicyGradientAdvantages, GroupMeanAndGrpoByHand) {
  // Groups of 4: {1, 0, 0, 1} (mean 0.5), {0.1 ×4} (all agree), {3, 1, 2, 2} (mean 2).
  const Vec rewards{1, 0, 0, 1, 0.1, 0.1, 0.1, 0.1, 3, 1, 2, 2};
  const GroupAdvantages mean = group_mean_advantages(rewards, 4);
  const Vec want_mean{0.5, -0.5, -0.5, 0.5, 0, 0, 0, 0, 1, -1, 0, 0};
  for (size_t i = 0; i < rewards.size(); ++i)
    EXPECT_NEAR(mean.advantages[i], want_mean[i], kHandTol);
  EXPECT_EQ(mean.uniform_groups, 1);

  // GRPO divides by the sample std + 1e-4: group 0 √((4·0.25)/3) = √(1/3) = 0.5773502691896258,
  // 0.5/(0.5773502691896258 + 1e-4) = 0.8658754297607016; group 2 √(2/3) = 0.816496580927726,
  // 1/(0.816496580927726 + 1e-4) = 1.2245948897605123.
  const GroupAdvantages grpo = grpo_advantages(rewards, 4);
  const Vec want_grpo{0.8658754297607016,
                      -0.8658754297607016,
                      -0.8658754297607016,
                      0.8658754297607016,
                      0,
                      0,
                      0,
                      0,
                      1.2245948897605123,
                      -1.2245948897605123,
                      0,
                      0};
  for (size_t i = 0; i < rewards.size(); ++i)
    EXPECT_NEAR(grpo.advantages[i], want_grpo[i], kHandTol);
  EXPECT_EQ(grpo.uniform_groups, 1);
}

TEST(PolicyGradientAdvantages, AgreeingGroupsAreExactlyZero) {
  // (0.1 + 0.1 + 0.1)/3 = 0.10000000000000002, so R − mean would be −1.4e-17 and GRPO's
  // −1.4e-17/(1.6e-17 + 1e-4) ≈ −1.4e-13 rather than 0: agreeing groups are set to 0, not computed.
  const Vec rewards{0.1, 0.1, 0.1, 1, 0, 1, 7, 7, 7};
  for (const GroupAdvantages& a :
       {group_mean_advantages(rewards, 3), grpo_advantages(rewards, 3)}) {
    for (size_t i : {0, 1, 2, 6, 7, 8}) EXPECT_EQ(a.advantages[i], 0.0) << i;
    EXPECT_NE(a.advantages[3], 0.0);
    EXPECT_EQ(a.uniform_groups, 2);
  }
}

TEST(PolicyGradientAdvantages, EmaBaselineUsedThenUpdated) {
  EmaBaseline baseline{0.9, 0.0};
  // Batch 1 is centred on 0, then b = 0.9·0 + 0.1·mean(1, 0) = 0.05.
  const Vec first = ema_advantages(Vec{1, 0}, baseline);
  EXPECT_EQ(first, (Vec{1, 0}));
  EXPECT_NEAR(baseline.value, 0.05, kHandTol);
  // Batch 2 on 0.05: 1 − 0.05 = 0.95 both; b = 0.9·0.05 + 0.1·1 = 0.145.
  const Vec second = ema_advantages(Vec{1, 1}, baseline);
  EXPECT_NEAR(second[0], 0.95, kHandTol);
  EXPECT_NEAR(second[1], 0.95, kHandTol);
  EXPECT_NEAR(baseline.value, 0.145, kHandTol);
  // An empty batch leaves it alone.
  EXPECT_TRUE(ema_advantages(Vec{}, baseline).empty());
  EXPECT_NEAR(baseline.value, 0.145, kHandTol);
}

TEST(PolicyGradientAdvantages, GaeByHand) {
  // One sequence: a masked prompt token, then 3 counted tokens with rewards 0, 0, 1 and values
  // 0.5, 0.6, 0.7 (V after the last token: 0).
  const std::vector<int64_t> offsets{0, 4};
  const std::vector<uint8_t> mask{0, 1, 1, 1};
  const Vec rewards{5.0, 0, 0, 1}, values{9.0, 0.5, 0.6, 0.7};
  // γ = 1, λ = 0.5: δ = (0 + 0.6 − 0.5, 0 + 0.7 − 0.6, 1 + 0 − 0.7) = (0.1, 0.1, 0.3);
  // A2 = 0.3, A1 = 0.1 + 0.5·0.3 = 0.25, A0 = 0.1 + 0.5·0.25 = 0.225; R = A + V =
  // (0.725, 0.85, 1.0).
  const GaeResult half = gae_advantages({offsets, mask}, rewards, values, {1.0, 0.5});
  const Vec want_a{0, 0.225, 0.25, 0.3}, want_r{0, 0.725, 0.85, 1.0};
  for (size_t t = 0; t < 4; ++t) {
    EXPECT_NEAR(half.advantages[t], want_a[t], kHandTol) << t;
    EXPECT_NEAR(half.returns[t], want_r[t], kHandTol) << t;
  }
  EXPECT_EQ(half.advantages[0], 0.0);  // the prompt token is not counted
  // γ = 0.9, λ = 1: the discounted return minus V: G = (0.81, 0.9, 1), A = (0.31, 0.3, 0.3).
  const GaeResult mc = gae_advantages({offsets, mask}, rewards, values, {0.9, 1.0});
  EXPECT_NEAR(mc.advantages[1], 0.31, kHandTol);
  EXPECT_NEAR(mc.advantages[2], 0.3, kHandTol);
  EXPECT_NEAR(mc.advantages[3], 0.3, kHandTol);
  EXPECT_NEAR(mc.returns[1], 0.81, kHandTol);
  // λ = 0: the one-step TD errors (0.1, 0.1, 0.3) with γ = 1.
  const GaeResult td = gae_advantages({offsets, mask}, rewards, values, {1.0, 0.0});
  EXPECT_NEAR(td.advantages[1], 0.1, kHandTol);
  EXPECT_NEAR(td.advantages[2], 0.1, kHandTol);
  EXPECT_NEAR(td.advantages[3], 0.3, kHandTol);
}

// PPO's first batch with a value head at zero, γ = λ = 1 and the reward on each completion's last
// counted token: every counted token's advantage (and return) is its completion's reward, exactly
// the sequence-level advantage a zero baseline gives, so the policy loss and its gradient agree
// bit for bit (what makes rl's ppo_gae step 1 equal reinforce_ema's, test_posttrain_runs.cpp).
TEST(PolicyGradientAdvantages, GaeWithoutDiscountOnZeroValuesIsTheSequenceReward) {
  const std::vector<int64_t> offsets{0, 4, 5, 9, 9};
  const std::vector<uint8_t> mask{0, 1, 1, 0, 1, 1, 0, 1, 0};
  const SequenceLayout layout{offsets, mask};
  const Vec sequence_rewards{0.75, -0.3, 0.1, 2.0};
  Vec rewards(mask.size(), 0.0);
  rewards[2] = 0.75;  // the last counted token of each sequence (the last has none)
  rewards[4] = -0.3;
  rewards[7] = 0.1;
  const GaeResult gae = gae_advantages(layout, rewards, Vec(mask.size(), 0.0), {1.0, 1.0});
  const Vec per_token = advantages_per_token(layout, sequence_rewards);
  EXPECT_EQ(gae.advantages, per_token);
  EXPECT_EQ(gae.returns, per_token);
  const Vec logp{-1, -2, -0.5, -3, -0.25, -1.5, -2, -0.75, -1};
  PolicyTokens a{layout, logp, logp, {}, gae.advantages}, b{layout, logp, logp, {}, per_token};
  const PolicyLossResult la = policy_loss(a, {}), lb = policy_loss(b, {});
  EXPECT_EQ(la.loss, lb.loss);
  EXPECT_EQ(la.grad_logp, lb.grad_logp);
}

TEST(PolicyGradientAdvantages, PerTokenCopiesToCountedTokens) {
  const std::vector<int64_t> offsets{0, 3, 5};
  const std::vector<uint8_t> mask{0, 1, 1, 1, 0};
  EXPECT_EQ(advantages_per_token({offsets, mask}, Vec{2.5, -1}), (Vec{0, 2.5, 2.5, -1, 0}));
}

TEST(PolicyGradientAdvantages, WhitenByHand) {
  // Counted advantages 1, 2, 3, 6 across two sequences: mean 3, sample variance (4 + 1 + 0 + 9)/3
  // = 14/3, so A ← (A − 3)/√(14/3 + 1e-8); the uncounted tokens become 0.
  const std::vector<int64_t> offsets{0, 3, 6};
  const std::vector<uint8_t> mask{0, 1, 1, 1, 1, 0};
  Vec a{7, 1, 2, 3, 6, -4};
  whiten_advantages({offsets, mask}, a);
  const double s = std::sqrt(14.0 / 3.0 + 1e-8);
  const Vec want{0, -2 / s, -1 / s, 0, 3 / s, 0};
  for (size_t t = 0; t < a.size(); ++t) EXPECT_NEAR(a[t], want[t], kHandTol) << t;
  // A lone counted token: centred to 0 (no variance to divide by).
  const std::vector<int64_t> one_offsets{0, 2};
  const std::vector<uint8_t> one_mask{0, 1};
  Vec lone{3, 5};
  whiten_advantages({one_offsets, one_mask}, lone);
  EXPECT_EQ(lone, (Vec{0, 0}));
  Vec short_a{1};
  EXPECT_NE(input_error([&] { whiten_advantages({one_offsets, one_mask}, short_a); }), "");
}

TEST(PolicyGradientAdvantages, NamesAndErrors) {
  for (AdvantageEstimator e :
       {AdvantageEstimator::kReinforceGroupMean, AdvantageEstimator::kReinforceEma,
        AdvantageEstimator::kGrpo, AdvantageEstimator::kPpoGae}) {
    EXPECT_EQ(parse_advantage_estimator(advantage_estimator_name(e)), e);
  }
  const std::string bad = input_error([] { parse_advantage_estimator("rloo"); });
  EXPECT_NE(bad.find("\"grpo\""), std::string::npos) << bad;
  EXPECT_NE(bad.find("\"ppo_gae\""), std::string::npos) << bad;

  const Vec rewards{1, 0, 1, 1, 0, 0};
  const std::string one = input_error([&] { grpo_advantages(rewards, 1); });
  EXPECT_NE(one.find("group_size = 1"), std::string::npos) << one;
  EXPECT_NE(one.find(">= 2"), std::string::npos) << one;
  const std::string split = input_error([&] { group_mean_advantages(rewards, 4); });
  EXPECT_NE(split.find("6 rewards do not split into groups of group_size = 4"), std::string::npos)
      << split;
  const std::string eps = input_error([&] { grpo_advantages(rewards, 2, -1e-4); });
  EXPECT_NE(eps.find("std_eps"), std::string::npos) << eps;

  EmaBaseline bad_decay{1.0, 0.0};
  const std::string decay = input_error([&] { ema_advantages(rewards, bad_decay); });
  EXPECT_NE(decay.find("decay = 1 is out of range; it must be in [0, 1)"), std::string::npos)
      << decay;

  const std::vector<int64_t> offsets{0, 2};
  const std::vector<uint8_t> mask{1, 1};
  const Vec two{0, 1};
  const std::string gamma = input_error([&] {
    gae_advantages({offsets, mask}, two, two, {1.5, 0.9});
  });
  EXPECT_NE(gamma.find("gamma = 1.5 is out of range; it must be in [0, 1]"), std::string::npos)
      << gamma;
  const std::string lambda = input_error([&] {
    gae_advantages({offsets, mask}, two, two, {1.0, -0.1});
  });
  EXPECT_NE(lambda.find("lambda = -0.1 is out of range"), std::string::npos) << lambda;
  const std::string values = input_error([&] {
    gae_advantages({offsets, mask}, two, Vec{0}, {1.0, 0.9});
  });
  EXPECT_NE(values.find("values has 1 entries but the mask has 2"), std::string::npos) << values;
}

// ---------------------------------------------------------------------------------------------
// The policy loss

// One sequence: a masked prompt token, then three counted tokens with lp_old = −1 and ratios
// 1.5, 0.9, 0.5, advantages 1, −2, −1; ε = 0.2 (clip to [0.8, 1.2]).
Batch clip_hand_batch() {
  Batch b;
  b.offsets = {0, 4};
  b.mask = {0, 1, 1, 1};
  b.logp_old = {-3.0, -1.0, -1.0, -1.0};
  b.logp = {-7.0, -1.0 + std::log(1.5), -1.0 + std::log(0.9), -1.0 + std::log(0.5)};
  b.advantages = {100.0, 1.0, -2.0, -1.0};
  return b;
}

TEST(PolicyGradientLoss, ClippedByHand) {
  const Batch b = clip_hand_batch();
  PolicyLossConfig config;  // clipped, ε 0.2/0.2, β 0, sequence_mean
  const PolicyLossResult r = policy_loss(b.view(), config);
  // t1: ρ 1.5 > 1.2 with A > 0: clipped, ℓ = −1.2·1 = −1.2, no gradient.
  // t2: ρ 0.9 inside: ℓ = −0.9·−2 = 1.8, dℓ/dlp = −A·ρ = 1.8.
  // t3: ρ 0.5 < 0.8 with A < 0: clipped, ℓ = −0.8·−1 = 0.8, no gradient.
  // One sequence of 3 counted tokens: L = (−1.2 + 1.8 + 0.8)/3 = 1.4/3, dL/dlp2 = 1.8/3 = 0.6.
  EXPECT_NEAR(r.loss, 1.4 / 3, kHandTol);
  EXPECT_EQ(r.grad_logp[0], 0.0);
  EXPECT_EQ(r.grad_logp[1], 0.0);
  EXPECT_NEAR(r.grad_logp[2], 0.6, kHandTol);
  EXPECT_EQ(r.grad_logp[3], 0.0);
  EXPECT_NEAR(r.clip_fraction, 2.0 / 3, kHandTol);
  EXPECT_NEAR(r.mean_ratio, 2.9 / 3, kHandTol);
  EXPECT_EQ(r.mean_kl, 0.0);
  EXPECT_EQ(r.tokens, 3);
  // Clip-higher (ε_high = 0.6): t1's 1.5 is inside [0.8, 1.6]: ℓ = −1.5, gradient −1·1.5.
  config.clip_high = 0.6;
  const PolicyLossResult higher = policy_loss(b.view(), config);
  EXPECT_NEAR(higher.loss, (-1.5 + 1.8 + 0.8) / 3, kHandTol);
  EXPECT_NEAR(higher.grad_logp[1], -1.5 / 3, kHandTol);
  EXPECT_NEAR(higher.clip_fraction, 1.0 / 3, kHandTol);
}

TEST(PolicyGradientLoss, KlPenaltyByHand) {
  // One token: lp = lp_old = −1 (ρ = 1), lp_ref = −1.5, A = 0.5, β = 0.1.
  // k3 = e^(−0.5) − (−0.5) − 1 = 0.10653065971263342; dk3/dlp = 1 − e^(−0.5) =
  // 0.3934693402873666. ℓ = −0.5 + 0.1·k3 = −0.48934693402873666; dℓ/dlp = −0.5 + 0.1·0.39347 =
  // −0.46065306597126334.
  Batch b;
  b.offsets = {0, 1};
  b.mask = {1};
  b.logp = {-1.0};
  b.logp_old = {-1.0};
  b.logp_ref = {-1.5};
  b.advantages = {0.5};
  PolicyLossConfig config;
  config.kl_coef = 0.1;
  const PolicyLossResult r = policy_loss(b.view(), config);
  EXPECT_NEAR(r.loss, -0.48934693402873666, kHandTol);
  EXPECT_NEAR(r.grad_logp[0], -0.46065306597126334, kHandTol);
  EXPECT_NEAR(r.mean_kl, 0.10653065971263342, kHandTol);
  // β = 0 still measures the KL, and the loss is the bare −ρ·A = −0.5.
  config.kl_coef = 0;
  const PolicyLossResult measured = policy_loss(b.view(), config);
  EXPECT_EQ(measured.loss, -0.5);
  EXPECT_NEAR(measured.mean_kl, 0.10653065971263342, kHandTol);
}

TEST(PolicyGradientLoss, AggregationModesByHand) {
  // REINFORCE at lp = −1, so ℓ = −A·lp = A: sequence 0 has one counted token (A = 1), sequence
  // 1 three (A = 2 each).
  Batch b;
  b.offsets = {0, 2, 5};
  b.mask = {0, 1, 1, 1, 1};
  b.logp = {-1, -1, -1, -1, -1};
  b.advantages = {7, 1, 2, 2, 2};
  PolicyLossConfig config;
  config.objective = PolicyObjective::kReinforce;
  // sequence_mean: (1/1 + 6/3)/2 = 1.5; dL/dlp = −A·w: w0 = 1/(2·1), w1 = 1/(2·3).
  config.aggregation = {LossAggregation::kSequenceMean, 0};
  PolicyLossResult r = policy_loss(b.view(), config);
  EXPECT_NEAR(r.loss, 1.5, kHandTol);
  EXPECT_NEAR(r.grad_logp[1], -0.5, kHandTol);
  EXPECT_NEAR(r.grad_logp[2], -2.0 / 6, kHandTol);
  EXPECT_EQ(r.mean_ratio, 1.0);  // no logp_old
  // token_mean: (1 + 6)/4 = 1.75; w = 1/4.
  config.aggregation = {LossAggregation::kTokenMean, 0};
  r = policy_loss(b.view(), config);
  EXPECT_NEAR(r.loss, 1.75, kHandTol);
  EXPECT_NEAR(r.grad_logp[1], -0.25, kHandTol);
  EXPECT_NEAR(r.grad_logp[2], -0.5, kHandTol);
  // constant, L_max = 4: (1 + 6)/(2·4) = 0.875; w = 1/8.
  config.aggregation = {LossAggregation::kConstant, 4};
  r = policy_loss(b.view(), config);
  EXPECT_NEAR(r.loss, 0.875, kHandTol);
  EXPECT_NEAR(r.grad_logp[1], -0.125, kHandTol);
  EXPECT_NEAR(r.grad_logp[2], -0.25, kHandTol);
  EXPECT_EQ(r.grad_logp[0], 0.0);
}

// Every combination the finite differences check: objective × aggregation, with a KL penalty.
std::vector<PolicyLossConfig> fd_configs() {
  std::vector<PolicyLossConfig> configs;
  for (PolicyObjective objective : {PolicyObjective::kClipped, PolicyObjective::kReinforce}) {
    for (LossAggregation mode : {LossAggregation::kSequenceMean, LossAggregation::kTokenMean,
                                 LossAggregation::kConstant}) {
      PolicyLossConfig c;
      c.objective = objective;
      c.clip_low = 0.2;
      c.clip_high = 0.28;
      c.kl_coef = 0.05;
      c.aggregation = {mode, 12};
      configs.push_back(c);
    }
  }
  return configs;
}

TEST(PolicyGradientLoss, GradientsMatchFiniteDifferences) {
  std::mt19937_64 rng(7);
  Batch b = random_batch(rng, 6, random_lengths(rng));
  for (const PolicyLossConfig& config : fd_configs()) {
    const std::string what = std::string(policy_objective_name(config.objective)) + "/" +
                             loss_aggregation_name(config.aggregation.mode);
    const PolicyLossResult r = policy_loss(b.view(), config);
    const Vec fd = central_differences(b.logp, [&] { return policy_loss(b.view(), config).loss; });
    for (size_t t = 0; t < b.logp.size(); ++t) {
      expect_fd_close(r.grad_logp[t], fd[t], what + " token " + std::to_string(t));
    }
    // Both sides of the clip are exercised, and the KL term is in the loss.
    if (config.objective == PolicyObjective::kClipped) {
      EXPECT_GT(r.clip_fraction, 0.05) << what;
      EXPECT_LT(r.clip_fraction, 0.95) << what;
    }
    EXPECT_GT(r.mean_kl, 0.0) << what;
  }
}

TEST(PolicyGradientLoss, GrpoAtRatioOneIsReinforce) {
  std::mt19937_64 rng(3);
  Batch b = random_batch(rng, 5, random_lengths(rng));
  b.logp_old = b.logp;  // ρ = exp(0) = 1 exactly
  for (LossAggregation mode :
       {LossAggregation::kSequenceMean, LossAggregation::kTokenMean, LossAggregation::kConstant}) {
    PolicyLossConfig grpo;
    grpo.aggregation = {mode, 12};
    PolicyLossConfig reinforce = grpo;
    reinforce.objective = PolicyObjective::kReinforce;
    const PolicyLossResult g = policy_loss(b.view(), grpo);
    const PolicyLossResult r = policy_loss(b.view(), reinforce);
    EXPECT_EQ(g.clip_fraction, 0.0);
    EXPECT_EQ(g.mean_ratio, 1.0);
    int nonzero = 0;
    for (size_t t = 0; t < b.logp.size(); ++t) {
      EXPECT_EQ(g.grad_logp[t], r.grad_logp[t]) << loss_aggregation_name(mode) << " token " << t;
      nonzero += g.grad_logp[t] != 0;
    }
    EXPECT_EQ(nonzero, g.tokens);
  }
}

TEST(PolicyGradientLoss, AggregationModesAgreeOnEqualLengths) {
  std::mt19937_64 rng(5);
  const int length = 6;
  Batch b = random_batch(rng, 5, [](int) { return length; });
  for (PolicyObjective objective : {PolicyObjective::kClipped, PolicyObjective::kReinforce}) {
    PolicyLossConfig config;
    config.objective = objective;
    config.kl_coef = 0.04;
    config.aggregation = {LossAggregation::kSequenceMean, 0};
    const PolicyLossResult seq = policy_loss(b.view(), config);
    config.aggregation = {LossAggregation::kTokenMean, 0};
    const PolicyLossResult tok = policy_loss(b.view(), config);
    config.aggregation = {LossAggregation::kConstant, length};
    const PolicyLossResult con = policy_loss(b.view(), config);
    // 1/(S·n), 1/T with T = S·n and 1/(S·L_max) are the same double: bitwise equal.
    EXPECT_EQ(seq.loss, tok.loss);
    EXPECT_EQ(seq.loss, con.loss);
    EXPECT_EQ(seq.grad_logp, tok.grad_logp);
    EXPECT_EQ(seq.grad_logp, con.grad_logp);
    // A longer L_max only scales: by length / L_max.
    config.aggregation = {LossAggregation::kConstant, 2 * length};
    const PolicyLossResult half = policy_loss(b.view(), config);
    EXPECT_NEAR(half.loss, seq.loss / 2, 1e-15 * std::abs(seq.loss));
  }
  // Unequal lengths: sequence_mean and token_mean differ (the test above could fail).
  Batch uneven = random_batch(rng, 5, [](int s) { return 2 + 3 * s; });
  PolicyLossConfig config;
  const double seq = policy_loss(uneven.view(), config).loss;
  config.aggregation = {LossAggregation::kTokenMean, 0};
  EXPECT_GT(std::abs(policy_loss(uneven.view(), config).loss - seq), 1e-6);
}

TEST(PolicyGradientLoss, MaskedTokensChangeNothing) {
  std::mt19937_64 rng(9);
  const Batch b = random_batch(rng, 6, random_lengths(rng));
  Batch perturbed = b;
  std::normal_distribution<double> noise(0.0, 1.0);
  int masked = 0;
  for (size_t t = 0; t < b.mask.size(); ++t) {
    if (b.mask[t] != 0) continue;
    ++masked;
    perturbed.logp[t] += 2 * noise(rng);
    perturbed.logp_old[t] += 2 * noise(rng);
    perturbed.logp_ref[t] += 2 * noise(rng);
    perturbed.advantages[t] = 50 * noise(rng);
  }
  ASSERT_GT(masked, 6);
  for (const PolicyLossConfig& config : fd_configs()) {
    const PolicyLossResult r = policy_loss(b.view(), config);
    const PolicyLossResult p = policy_loss(perturbed.view(), config);
    EXPECT_EQ(r.loss, p.loss);
    EXPECT_EQ(r.grad_logp, p.grad_logp);
    EXPECT_EQ(r.clip_fraction, p.clip_fraction);
    EXPECT_EQ(r.mean_kl, p.mean_kl);
    EXPECT_EQ(r.mean_ratio, p.mean_ratio);
    for (size_t t = 0; t < b.mask.size(); ++t) {
      if (b.mask[t] == 0) {
        EXPECT_EQ(r.grad_logp[t], 0.0) << t;
      }
    }
  }
}

TEST(PolicyGradientLoss, HalvesWithTheBatchNormalizersAddUpToTheBatch) {
  std::mt19937_64 rng(13);
  const Batch b = random_batch(rng, 7, random_lengths(rng));
  const Batch first = b.slice(0, 3), second = b.slice(3, 7);
  const LossNormalizers whole = count_normalizers(b.layout());
  LossNormalizers summed = count_normalizers(first.layout());
  summed += count_normalizers(second.layout());
  EXPECT_EQ(summed.sequences, whole.sequences);
  EXPECT_EQ(summed.tokens, whole.tokens);
  for (const PolicyLossConfig& config : fd_configs()) {
    const std::string what = std::string(policy_objective_name(config.objective)) + "/" +
                             loss_aggregation_name(config.aggregation.mode);
    const PolicyLossResult all = policy_loss(b.view(), config);
    const PolicyLossResult a = policy_loss(first.view(), config, whole);
    const PolicyLossResult c = policy_loss(second.view(), config, whole);
    // Each token's gradient is computed alone with the same weight: bitwise. The loss is the
    // same sum regrouped: to a few ulps.
    Vec joined = a.grad_logp;
    joined.insert(joined.end(), c.grad_logp.begin(), c.grad_logp.end());
    EXPECT_EQ(joined, all.grad_logp) << what;
    EXPECT_NEAR(a.loss + c.loss, all.loss, 1e-14 * std::max(1.0, std::abs(all.loss))) << what;
    EXPECT_EQ(a.tokens + c.tokens, all.tokens);
    // The metrics, weighted by tokens, recombine.
    EXPECT_NEAR((a.mean_kl * a.tokens + c.mean_kl * c.tokens) / all.tokens, all.mean_kl, 1e-14);
    // With its own normalizers (S and T of the half) a half is a different loss: they matter.
    const PolicyLossResult own = policy_loss(first.view(), config);
    EXPECT_NE(own.grad_logp, a.grad_logp) << what;
  }
}

TEST(PolicyGradientLoss, NamesAndErrors) {
  for (LossAggregation m :
       {LossAggregation::kSequenceMean, LossAggregation::kTokenMean, LossAggregation::kConstant}) {
    EXPECT_EQ(parse_loss_aggregation(loss_aggregation_name(m)), m);
  }
  for (PolicyObjective o : {PolicyObjective::kClipped, PolicyObjective::kReinforce}) {
    EXPECT_EQ(parse_policy_objective(policy_objective_name(o)), o);
  }
  const std::string agg = input_error([] { parse_loss_aggregation("mean"); });
  EXPECT_NE(agg.find("\"sequence_mean\" (GRPO), \"token_mean\" (DAPO) or \"constant\""),
            std::string::npos)
      << agg;
  const std::string obj = input_error([] { parse_policy_objective("ppo"); });
  EXPECT_NE(obj.find("\"clipped\""), std::string::npos) << obj;

  const Batch b = clip_hand_batch();
  auto error_of = [&](const PolicyLossConfig& config) {
    return input_error([&] { policy_loss(b.view(), config); });
  };
  PolicyLossConfig config;
  config.clip_low = 1.5;
  std::string e = error_of(config);
  EXPECT_NE(e.find("clip_low = 1.5 is out of range; it must be in [0, 1]"), std::string::npos) << e;
  config = {};
  config.clip_high = -0.1;
  e = error_of(config);
  EXPECT_NE(e.find("clip_high"), std::string::npos) << e;
  EXPECT_NE(e.find(">= 0"), std::string::npos) << e;
  config = {};
  config.kl_coef = -1;
  e = error_of(config);
  EXPECT_NE(e.find("kl_coef = -1 is out of range; it must be >= 0"), std::string::npos) << e;
  config = {};
  config.kl_coef = 0.1;  // the hand batch has no logp_ref
  e = error_of(config);
  EXPECT_NE(e.find("kl_coef = 0.1 needs logp_ref"), std::string::npos) << e;
  config = {};
  config.aggregation = {LossAggregation::kConstant, 0};
  e = error_of(config);
  EXPECT_NE(e.find("max_length = 0 is out of range"), std::string::npos) << e;
  config.aggregation = {LossAggregation::kConstant, 2};
  e = error_of(config);
  EXPECT_NE(e.find("sequence 0 has 3 counted tokens, more than max_length = 2"), std::string::npos)
      << e;

  Batch short_old = b;
  short_old.logp_old.pop_back();
  e = input_error([&] { policy_loss(short_old.view(), PolicyLossConfig{}); });
  EXPECT_NE(e.find("logp_old has 3 entries but the mask has 4; give one entry per token"),
            std::string::npos)
      << e;
  Batch no_old = b;
  no_old.logp_old.clear();
  e = input_error([&] { policy_loss(no_old.view(), PolicyLossConfig{}); });
  EXPECT_NE(e.find("needs logp_old"), std::string::npos) << e;
  PolicyLossConfig reinforce;
  reinforce.objective = PolicyObjective::kReinforce;
  EXPECT_NO_THROW(policy_loss(no_old.view(), reinforce));

  Batch bad_offsets = b;
  bad_offsets.offsets = {0, 3};
  e = input_error([&] { policy_loss(bad_offsets.view(), PolicyLossConfig{}); });
  EXPECT_NE(e.find("the last sequence offset is 3 but the mask has 4 tokens"), std::string::npos)
      << e;
  Batch nan_adv = b;
  nan_adv.advantages[2] = std::nan("");
  e = input_error([&] { policy_loss(nan_adv.view(), PolicyLossConfig{}); });
  EXPECT_NE(e.find("advantages[2] = nan is not a finite number"), std::string::npos) << e;

  e = input_error([&] { policy_loss(b.view(), PolicyLossConfig{}, LossNormalizers{1, 2}); });
  EXPECT_NE(e.find("are smaller than this part's (1 sequences, 3 counted tokens)"),
            std::string::npos)
      << e;
}

// ---------------------------------------------------------------------------------------------
// The value loss

struct ValueBatch {
  std::vector<int64_t> offsets{0};
  std::vector<uint8_t> mask;
  Vec values, old_values, returns;
  ValueTokens view() const { return {{offsets, mask}, values, old_values, returns}; }
};

TEST(PolicyGradientValueLoss, ClippedByHand) {
  // ε_v = 0.1, token_mean over 3 counted tokens (a masked first token):
  //   V 1.0, R 0.5, V_old 0.8: V_clip 0.9, (0.5)² = 0.25 > (0.4)² = 0.16: ℓ 0.125, dℓ/dV 0.5
  //   V 0.5, R 1.0, V_old 0.8: V_clip 0.7, 0.25 > 0.09: ℓ 0.125, dℓ/dV −0.5
  //   V 0.5, R 0.4, V_old 0.8: V_clip 0.7, 0.01 < 0.09: ℓ 0.045, clipped, dℓ/dV 0
  // L = 0.295/3; dL/dV = (0.5, −0.5, 0)/3; clip fraction 1/3.
  ValueBatch b;
  b.offsets = {0, 4};
  b.mask = {0, 1, 1, 1};
  b.values = {3.0, 1.0, 0.5, 0.5};
  b.returns = {-3.0, 0.5, 1.0, 0.4};
  b.old_values = {0.0, 0.8, 0.8, 0.8};
  const ValueLossResult r = value_loss(b.view(), {0.1, {LossAggregation::kTokenMean, 0}});
  EXPECT_NEAR(r.loss, 0.295 / 3, kHandTol);
  EXPECT_EQ(r.grad_values[0], 0.0);
  EXPECT_NEAR(r.grad_values[1], 0.5 / 3, kHandTol);
  EXPECT_NEAR(r.grad_values[2], -0.5 / 3, kHandTol);
  EXPECT_EQ(r.grad_values[3], 0.0);
  EXPECT_NEAR(r.clip_fraction, 1.0 / 3, kHandTol);
  // Unclipped: ½(0.25 + 0.25 + 0.01)/3 = 0.255/3; dL/dV = (0.5, −0.5, 0.1)/3.
  const ValueLossResult plain = value_loss(b.view(), ValueLossConfig{});
  EXPECT_NEAR(plain.loss, 0.255 / 3, kHandTol);
  EXPECT_NEAR(plain.grad_values[3], 0.1 / 3, kHandTol);
  EXPECT_EQ(plain.clip_fraction, 0.0);
}

TEST(PolicyGradientValueLoss, GradientsMatchFiniteDifferencesAndHalvesAddUp) {
  std::mt19937_64 rng(17);
  std::normal_distribution<double> normal(0.0, 1.0);
  ValueBatch b;
  const Batch shape = random_batch(rng, 6, random_lengths(rng));
  b.offsets = shape.offsets;
  b.mask = shape.mask;
  const double eps = 0.2;
  for (size_t t = 0; t < b.mask.size(); ++t) {
    double old, v, ret;
    // Away from the kinks: |V − V_old| = ε_v, and where V is outside the band, a tie between
    // |V − R| and |V_clip − R| (the max switching sides).
    auto near_kink = [&](double o, double x, double r) {
      const double clipped = o + std::clamp(x - o, -eps, eps);
      return std::abs(std::abs(x - o) - eps) < 1e-3 ||
             (std::abs(x - o) > eps && std::abs(std::abs(clipped - r) - std::abs(x - r)) < 1e-3);
    };
    do {
      old = 0.3 + 0.5 * normal(rng);
      v = old + 0.5 * normal(rng);
      ret = old + 0.5 * normal(rng);
    } while (near_kink(old, v, ret));
    b.old_values.push_back(old);
    b.values.push_back(v);
    b.returns.push_back(ret);
  }
  for (double clip : {0.0, eps}) {
    for (LossAggregation mode : {LossAggregation::kSequenceMean, LossAggregation::kTokenMean,
                                 LossAggregation::kConstant}) {
      const ValueLossConfig config{clip, {mode, 12}};
      const std::string what =
          "clip " + std::to_string(clip) + " " + loss_aggregation_name(config.aggregation.mode);
      const ValueLossResult r = value_loss(b.view(), config);
      const Vec fd =
          central_differences(b.values, [&] { return value_loss(b.view(), config).loss; });
      for (size_t t = 0; t < b.values.size(); ++t) {
        expect_fd_close(r.grad_values[t], fd[t], what + " token " + std::to_string(t));
      }
      if (clip > 0) {
        EXPECT_GT(r.clip_fraction, 0.05) << what;
        EXPECT_LT(r.clip_fraction, 0.95) << what;
      }
      // Two halves (sequences 0-2 and 3-5) with the whole batch's normalizers.
      const LossNormalizers whole = count_normalizers({b.offsets, b.mask});
      const int64_t cut = b.offsets[3];
      ValueBatch first, second;
      first.offsets.assign(b.offsets.begin(), b.offsets.begin() + 4);
      second.offsets.clear();
      for (size_t s = 3; s < b.offsets.size(); ++s) second.offsets.push_back(b.offsets[s] - cut);
      auto split = [&](const auto& v, auto& x, auto& y) {
        x.assign(v.begin(), v.begin() + cut);
        y.assign(v.begin() + cut, v.end());
      };
      split(b.mask, first.mask, second.mask);
      split(b.values, first.values, second.values);
      split(b.old_values, first.old_values, second.old_values);
      split(b.returns, first.returns, second.returns);
      const ValueLossResult x = value_loss(first.view(), config, whole);
      const ValueLossResult y = value_loss(second.view(), config, whole);
      Vec joined = x.grad_values;
      joined.insert(joined.end(), y.grad_values.begin(), y.grad_values.end());
      EXPECT_EQ(joined, r.grad_values) << what;
      EXPECT_NEAR(x.loss + y.loss, r.loss, 1e-14 * std::max(1.0, r.loss)) << what;
    }
  }
}

TEST(PolicyGradientValueLoss, Errors) {
  ValueBatch b;
  b.offsets = {0, 2};
  b.mask = {1, 1};
  b.values = {0.1, 0.2};
  b.returns = {0.3, 0.4};
  std::string e = input_error([&] { value_loss(b.view(), {-0.1, {}}); });
  EXPECT_NE(e.find("value_clip = -0.1 is out of range; it must be >= 0"), std::string::npos) << e;
  e = input_error([&] { value_loss(b.view(), {0.2, {}}); });
  EXPECT_NE(e.find("value_clip = 0.2 needs old_values"), std::string::npos) << e;
  b.returns.pop_back();
  e = input_error([&] { value_loss(b.view(), {}); });
  EXPECT_NE(e.find("returns has 1 entries but the mask has 2"), std::string::npos) << e;
}

// ---------------------------------------------------------------------------------------------
// Against the PyTorch reference (tests/data/posttrain_losses_golden.json, written by
// tools/golden/make_posttrain_losses_golden.py).

const nlohmann::json& golden() {
  static const nlohmann::json g =
      nlohmann::json::parse(read_file(source_path("tests/data/posttrain_losses_golden.json")));
  return g;
}

void expect_golden(double got, double want, const std::string& what) {
  EXPECT_NEAR(got, want, kGoldenTol * std::max(1.0, std::abs(want))) << what;
}

void expect_golden(const Vec& got, const nlohmann::json& want, const std::string& what) {
  const Vec w = want.get<Vec>();
  ASSERT_EQ(got.size(), w.size()) << what;
  for (size_t i = 0; i < w.size(); ++i)
    expect_golden(got[i], w[i], what + "[" + std::to_string(i) + "]");
}

TEST(PolicyGradientGolden, Dpo) {
  int inactive_hinge = 0;
  for (const auto& c : golden().at("dpo")) {
    const std::string name = c.at("name");
    const Vec pc = c.at("policy_chosen"), pr = c.at("policy_rejected"),
              rc = c.at("reference_chosen"), rr = c.at("reference_rejected");
    const DpoConfig config{parse_dpo_loss_kind(c.at("kind").get<std::string>()),
                           c.at("beta").get<double>()};
    const DpoResult r = dpo_loss({pc, pr, rc, rr}, config, c.at("batch_pairs").get<int64_t>());
    const auto& e = c.at("expected");
    expect_golden(r.loss, e.at("loss"), name + " loss");
    expect_golden(r.grad_policy_chosen, e.at("grad_policy_chosen"), name + " grad chosen");
    expect_golden(r.grad_policy_rejected, e.at("grad_policy_rejected"), name + " grad rejected");
    expect_golden(r.reward_chosen, e.at("reward_chosen"), name + " reward_chosen");
    expect_golden(r.reward_rejected, e.at("reward_rejected"), name + " reward_rejected");
    expect_golden(r.reward_margin, e.at("reward_margin"), name + " reward_margin");
    EXPECT_EQ(r.reward_accuracy, e.at("reward_accuracy").get<double>()) << name;
    if (config.kind == DpoLossKind::kHinge) {
      for (double g : r.grad_policy_chosen) inactive_hinge += g == 0;
    }
  }
  EXPECT_EQ(golden().at("dpo").size(), 6u);
  EXPECT_GT(inactive_hinge, 0);  // the golden has pairs past the hinge's margin
}

TEST(PolicyGradientGolden, Advantages) {
  int uniform = 0;
  for (const auto& c : golden().at("group")) {
    const std::string name = c.at("name");
    const Vec rewards = c.at("rewards");
    const int64_t size = c.at("group_size");
    const GroupAdvantages r = c.at("estimator") == "grpo"
                                  ? grpo_advantages(rewards, size, c.at("std_eps").get<double>())
                                  : group_mean_advantages(rewards, size);
    expect_golden(r.advantages, c.at("expected").at("advantages"), name);
    EXPECT_EQ(r.uniform_groups, c.at("expected").at("uniform_groups").get<int64_t>()) << name;
    uniform += static_cast<int>(r.uniform_groups);
  }
  EXPECT_GT(uniform, 0);
  for (const auto& c : golden().at("ema")) {
    const std::string name = c.at("name");
    EmaBaseline baseline{c.at("decay").get<double>(), c.at("initial_value").get<double>()};
    const auto& batches = c.at("batches");
    for (size_t i = 0; i < batches.size(); ++i) {
      const Vec a = ema_advantages(batches[i].get<Vec>(), baseline);
      expect_golden(a, c.at("expected").at("advantages")[i], name);
      expect_golden(baseline.value, c.at("expected").at("baselines")[i], name + " baseline");
    }
  }
  for (const auto& c : golden().at("gae")) {
    const std::string name = c.at("name");
    const std::vector<int64_t> offsets = c.at("offsets");
    const std::vector<uint8_t> mask = c.at("mask");
    const GaeResult r =
        gae_advantages({offsets, mask}, c.at("rewards").get<Vec>(), c.at("values").get<Vec>(),
                       {c.at("gamma").get<double>(), c.at("lambda").get<double>()});
    expect_golden(r.advantages, c.at("expected").at("advantages"), name + " advantages");
    expect_golden(r.returns, c.at("expected").at("returns"), name + " returns");
  }
}

TEST(PolicyGradientGolden, PolicyLoss) {
  int clipped_cases = 0, parts = 0;
  for (const auto& c : golden().at("policy")) {
    const std::string name = c.at("name");
    const auto& cfg = c.at("config");
    PolicyLossConfig config;
    config.objective = parse_policy_objective(cfg.at("objective").get<std::string>());
    config.clip_low = cfg.at("clip_low");
    config.clip_high = cfg.at("clip_high");
    config.kl_coef = cfg.at("kl_coef");
    config.aggregation = {parse_loss_aggregation(cfg.at("aggregation").get<std::string>()),
                          cfg.at("max_length").get<int64_t>()};
    const std::vector<int64_t> offsets = c.at("offsets");
    const std::vector<uint8_t> mask = c.at("mask");
    const Vec logp = c.at("logp"), logp_old = c.at("logp_old"), logp_ref = c.at("logp_ref"),
              advantages = c.at("advantages");
    const LossNormalizers whole{c.at("normalizers").at("sequences").get<int64_t>(),
                                c.at("normalizers").at("tokens").get<int64_t>()};
    const PolicyLossResult r =
        policy_loss({{offsets, mask}, logp, logp_old, logp_ref, advantages}, config, whole);
    const auto& e = c.at("expected");
    expect_golden(r.loss, e.at("loss"), name + " loss");
    expect_golden(r.grad_logp, e.at("grad_logp"), name + " grad_logp");
    expect_golden(r.clip_fraction, e.at("clip_fraction"), name + " clip_fraction");
    expect_golden(r.mean_kl, e.at("mean_kl"), name + " mean_kl");
    expect_golden(r.mean_ratio, e.at("mean_ratio"), name + " mean_ratio");
    EXPECT_EQ(r.tokens, e.at("tokens").get<int64_t>()) << name;
    clipped_cases += r.clip_fraction > 0;
    parts += whole.tokens > r.tokens;
  }
  EXPECT_EQ(golden().at("policy").size(), 18u);
  EXPECT_GE(clipped_cases, 6);  // the golden exercises the clip
  EXPECT_EQ(parts, 3);          // and parts of a larger batch
}

TEST(PolicyGradientGolden, ValueLoss) {
  for (const auto& c : golden().at("value")) {
    const std::string name = c.at("name");
    const auto& cfg = c.at("config");
    const ValueLossConfig config{cfg.at("value_clip").get<double>(),
                                 {parse_loss_aggregation(cfg.at("aggregation").get<std::string>()),
                                  cfg.at("max_length").get<int64_t>()}};
    const std::vector<int64_t> offsets = c.at("offsets");
    const std::vector<uint8_t> mask = c.at("mask");
    const Vec values = c.at("values"), old_values = c.at("old_values"), returns = c.at("returns");
    const LossNormalizers whole{c.at("normalizers").at("sequences").get<int64_t>(),
                                c.at("normalizers").at("tokens").get<int64_t>()};
    const ValueLossResult r =
        value_loss({{offsets, mask}, values, old_values, returns}, config, whole);
    const auto& e = c.at("expected");
    expect_golden(r.loss, e.at("loss"), name + " loss");
    expect_golden(r.grad_values, e.at("grad_values"), name + " grad_values");
    expect_golden(r.clip_fraction, e.at("clip_fraction"), name + " clip_fraction");
    EXPECT_EQ(r.tokens, e.at("tokens").get<int64_t>()) << name;
  }
}

}  // namespace
}  // namespace nanogpt
