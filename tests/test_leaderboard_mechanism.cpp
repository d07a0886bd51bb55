// The leaderboard mechanisms on crafted submission sequences whose answers are computed by hand
// in the comments, and the subsample mechanism's votes: reproducible from the seed, and
// unbiased within a binomial band.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "eval/leaderboard_mechanism.hpp"
#include "runtime/error.hpp"
#include "runtime/random.hpp"

namespace nanogpt {
namespace {

// n per-row 0-1 losses with the first `wrong` rows wrong (the mechanisms other than
// ladder-free depend on the mean only).
std::vector<double> losses_with(int wrong, int n) {
  std::vector<double> l(static_cast<size_t>(n), 0.0);
  for (int i = 0; i < wrong; ++i) l[static_cast<size_t>(i)] = 1.0;
  return l;
}

MechanismParams params(MechanismKind kind, double eta = 0.01, int64_t votes = 1000,
                       uint64_t seed = 0) {
  MechanismParams p;
  p.kind = kind;
  p.eta = eta;
  p.votes = votes;
  p.seed = seed;
  return p;
}

TEST(LeaderboardMechanism, KaggleShowsEveryScoreToFiveDecimals) {
  LeaderboardMechanism m(params(MechanismKind::kKaggle));
  EXPECT_DOUBLE_EQ(m.answer(losses_with(1, 3)).answer, 0.33333);  // 1/3
  EXPECT_DOUBLE_EQ(m.answer(losses_with(2, 3)).answer, 0.66667);  // 2/3 rounds up
  EXPECT_DOUBLE_EQ(m.answer(losses_with(1, 8)).answer, 0.125);    // exact
  // A worse score is shown as it is: kaggle answers each submission, not the best.
  EXPECT_DOUBLE_EQ(m.answer(losses_with(7, 8)).answer, 0.875);
  EXPECT_FALSE(m.answer(losses_with(0, 8)).leads);
  EXPECT_EQ(m.memory().answered, 5);
}

TEST(LeaderboardMechanism, LadderShowsOnlyImprovementsOfMoreThanEtaRoundedToEta) {
  // n = 100 rows, eta = 0.1. Losses (wrong rows / 100) and what the Ladder must answer:
  const int n = 100;
  struct Step {
    int wrong;
    double shown;
    bool leads;
  };
  const Step steps[] = {
      {50, 0.5, true},   // first submission: always shown, round(0.50 / 0.1) * 0.1 = 0.5
      {45, 0.5, false},  // 0.50 - 0.45 = 0.05 <= eta
      {40, 0.5, false},  // 0.50 - 0.40 = 0.10: exactly eta is not *more* than eta
      {39, 0.4, true},   // 0.11 > eta; round(3.9) * 0.1 = 0.4 (shown above the true 0.39)
      {31, 0.4, false},  // 0.40 - 0.31 = 0.09, measured against the shown 0.4, not 0.39
      {29, 0.3, true},   // 0.11 > eta; round(2.9) * 0.1 = 0.3
      {60, 0.3, false},  // worse: the board keeps its score
      {21, 0.3, false},  // 0.09
      {19, 0.2, true},   // 0.11; round(1.9) * 0.1 = 0.2
      {0, 0.0, true},    // 0.2 > eta; 0.0
  };
  LeaderboardMechanism m(params(MechanismKind::kLadder, 0.1));
  for (const Step& s : steps) {
    const MechanismAnswer a = m.answer(losses_with(s.wrong, n));
    EXPECT_NEAR(a.answer, s.shown, 1e-12) << "after a submission with loss " << s.wrong << "/100";
    EXPECT_EQ(a.leads, s.leads) << s.wrong;
  }
}

TEST(LeaderboardMechanism, LadderWithASmallStepRoundsToItsMultiples) {
  // eta = 0.025 on n = 1000: 0.4870 shows as round(19.48) * 0.025 = 0.475; then 0.4610 beats the
  // shown 0.475 by 0.014 <= eta (no), 0.4490 by 0.026 > eta: round(17.96) * 0.025 = 0.45.
  LeaderboardMechanism m(params(MechanismKind::kLadder, 0.025));
  EXPECT_NEAR(m.answer(losses_with(487, 1000)).answer, 0.475, 1e-12);
  EXPECT_NEAR(m.answer(losses_with(461, 1000)).answer, 0.475, 1e-12);
  EXPECT_NEAR(m.answer(losses_with(449, 1000)).answer, 0.45, 1e-12);
}

TEST(LeaderboardMechanism, ParameterFreeLadderNeedsToBeatThePairedStandardError) {
  // n = 8. Against the leader L = [1,1,1,1,0,0,0,0] (0.5):
  // - one row fixed: the differences are one -1 and seven 0s, mean -1/8, sample variance
  //   (7/8)^2 + 7 (1/8)^2 = 56/64 over n - 1 = 7: 1/8, s = 0.35355, s/sqrt(8) = 0.125 — exactly
  //   the improvement 1/8, which is not *more*: no lead;
  // - two rows fixed: variance 2(n-2)/(n(n-1)) = 12/56, s = 0.46291, s/sqrt(8) = 0.16366 < 0.25:
  //   it leads and the board shows 0.25;
  // - then [0,0,0,1,1,0,0,0] (0.25, no gain) and [0,0,0,1,0,0,0,0] (0.125: differences against
  //   [0,0,1,1,0,...] are one -1: the tie again, so no lead).
  LeaderboardMechanism m(params(MechanismKind::kLadderFree));
  auto v = [](std::initializer_list<double> x) { return std::vector<double>(x); };
  MechanismAnswer a = m.answer(v({1, 1, 1, 1, 0, 0, 0, 0}));
  EXPECT_TRUE(a.leads);
  EXPECT_DOUBLE_EQ(a.answer, 0.5);
  a = m.answer(v({0, 1, 1, 1, 0, 0, 0, 0}));
  EXPECT_FALSE(a.leads);
  EXPECT_DOUBLE_EQ(a.answer, 0.5);
  a = m.answer(v({0, 0, 1, 1, 0, 0, 0, 0}));
  EXPECT_TRUE(a.leads);
  EXPECT_DOUBLE_EQ(a.answer, 0.25);
  a = m.answer(v({0, 0, 0, 1, 1, 0, 0, 0}));
  EXPECT_FALSE(a.leads);
  EXPECT_DOUBLE_EQ(a.answer, 0.25);
  a = m.answer(v({0, 0, 0, 1, 0, 0, 0, 0}));
  EXPECT_FALSE(a.leads);
  EXPECT_DOUBLE_EQ(a.answer, 0.25);
  EXPECT_EQ(m.memory().leader_losses, v({0, 0, 1, 1, 0, 0, 0, 0}));
}

TEST(LeaderboardMechanism, ParameterFreeLadderRefusesTheSameGainWithMoreVariance) {
  // n = 4, leader [1,1,0,0] (0.5). Both candidates score 0.25:
  // - [0,0,1,0]: differences [-1,-1,1,0], mean -1/4, squares 9/16+9/16+25/16+1/16 = 44/16 over
  //   3: s = 0.95743, s/2 = 0.47871 > 0.25: no lead;
  // - [0,0,0,0] (0.5 better): differences [-1,-1,0,0], s = sqrt(1/3) = 0.57735, s/2 = 0.28868
  //   < 0.5: leads, shows 0.
  LeaderboardMechanism m(params(MechanismKind::kLadderFree));
  m.answer(std::vector<double>{1, 1, 0, 0});
  EXPECT_FALSE(m.answer(std::vector<double>{0, 0, 1, 0}).leads);
  const MechanismAnswer a = m.answer(std::vector<double>{0, 0, 0, 0});
  EXPECT_TRUE(a.leads);
  EXPECT_DOUBLE_EQ(a.answer, 0.0);
}

TEST(LeaderboardMechanism, SubsampleIsReproducibleFromItsSeedAndDependsOnIt) {
  Rng rng(7);
  std::vector<std::vector<double>> subs(20, std::vector<double>(500));
  for (auto& s : subs) {
    for (double& x : s) x = rng.uniform() < 0.3 ? 1.0 : 0.0;
  }
  auto run = [&](uint64_t seed) {
    LeaderboardMechanism m(params(MechanismKind::kSubsample, 0.01, 200, seed));
    std::vector<double> answers;
    for (const auto& s : subs) answers.push_back(m.answer(s).answer);
    return answers;
  };
  const std::vector<double> a = run(42);
  EXPECT_EQ(a, run(42));
  EXPECT_NE(a, run(43));
  for (double x : a) EXPECT_DOUBLE_EQ(x * 200, std::round(x * 200)) << "a count of 200 votes";
  // A board restored from its memory continues the same sequence (votes depend on the seed and
  // the submission number only).
  LeaderboardMechanism first(params(MechanismKind::kSubsample, 0.01, 200, 42));
  for (int i = 0; i < 10; ++i) first.answer(subs[static_cast<size_t>(i)]);
  LeaderboardMechanism resumed(first.params(), first.memory());
  for (int i = 10; i < 20; ++i) {
    EXPECT_EQ(resumed.answer(subs[static_cast<size_t>(i)]).answer, a[static_cast<size_t>(i)]);
  }
}

TEST(LeaderboardMechanism, SubsampleVotesAreUnbiasedWithinABinomialBand) {
  // Zero-one losses with mean 0.3 and brier losses all 0.25 (each vote Bernoulli(0.25)): each
  // answer is Binomial(1000, p)/1000 (rows drawn with replacement), so the mean of 400 answers
  // has standard deviation sqrt(p(1-p)/400000) <= 0.00079; 6 of those is 0.0048. Fixed seed:
  // deterministic, and a correct mechanism passes for all but ~1e-9 of seeds.
  std::vector<double> zero_one(1000, 0.0), brier(1000, 0.25);
  for (int i = 0; i < 300; ++i) zero_one[static_cast<size_t>(i) * 3 % 1000] = 1.0;
  for (const auto& [losses, p] : {std::pair{zero_one, 0.3}, std::pair{brier, 0.25}}) {
    LeaderboardMechanism m(params(MechanismKind::kSubsample, 0.01, 1000, 5));
    double sum = 0;
    for (int i = 0; i < 400; ++i) sum += m.answer(losses).answer;
    EXPECT_NEAR(sum / 400, p, 0.0048);
  }
  // All-right and all-wrong submissions are answered exactly.
  LeaderboardMechanism m(params(MechanismKind::kSubsample, 0.01, 100, 1));
  EXPECT_EQ(m.answer(std::vector<double>(50, 0.0)).answer, 0.0);
  EXPECT_EQ(m.answer(std::vector<double>(50, 1.0)).answer, 1.0);
}

TEST(LeaderboardMechanism, BadParametersAndNamesAreErrors) {
  EXPECT_THROW(LeaderboardMechanism(params(MechanismKind::kLadder, 0.0)), InputError);
  EXPECT_THROW(LeaderboardMechanism(params(MechanismKind::kLadder, 1.5)), InputError);
  EXPECT_THROW(LeaderboardMechanism(params(MechanismKind::kSubsample, 0.01, 0)), InputError);
  EXPECT_THROW(parse_mechanism("ladder2"), InputError);
  for (auto k : {MechanismKind::kKaggle, MechanismKind::kLadder, MechanismKind::kLadderFree,
                 MechanismKind::kSubsample}) {
    EXPECT_EQ(parse_mechanism(mechanism_name(k)), k);
  }
}

}  // namespace
}  // namespace nanogpt
