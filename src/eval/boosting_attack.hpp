// The boosting attack of Blum & Hardt (2015, section 6), run against every mechanism: a holdout
// of n uniformly random binary labels; k uniformly random label vectors are submitted; the
// attacker keeps those the public answers call better than chance and submits their majority
// vote. None of it has any skill — its loss on fresh labels is 1/2 — so whatever the board
// shows below 1/2 is overfitting that the mechanism let through.
//
// What counts as "better than chance" for the attacker, from the public answers only:
// - kaggle, subsample (an answer per submission): an answer below 1/2;
// - ladder, ladder-free (the best so far): a submission that moved the board to below 1/2.
// The majority breaks ties toward label 1 (as their code does); with nothing kept it is all 1s.
//
// Speed: labels and vectors are bit-packed, losses counted with popcount, and one sequence of
// max(k) submissions per seed serves every k: the attack with k vectors is the first k of them
// (the mechanisms answer online), and its majority vote is answered on a copy of the
// mechanism's memory after submission k. The mechanisms are the leaderboard's own
// (leaderboard_mechanism.hpp), fed the per-row 0/1 losses.
#pragma once

#include <cstdint>
#include <vector>

#include "eval/leaderboard_mechanism.hpp"

namespace nanogpt {

struct BoostingAttackOptions {
  int64_t rows = 4000;                      // n
  std::vector<int64_t> ks;                  // numbers of random submissions, ascending
  int64_t seeds = 100;                      // independent holdouts averaged over
  uint64_t first_seed = 1;                  // seeds first_seed, first_seed + 1, ...
  std::vector<MechanismParams> mechanisms;  // each with its parameters; seeds are overridden
};

// Averages over seeds for one mechanism and one k.
struct BoostingAttackPoint {
  MechanismKind mechanism = MechanismKind::kKaggle;
  int64_t k = 0;
  double holdout_loss = 0;  // the majority vote's exact loss on the holdout (Blum & Hardt's plot)
  double shown = 0;         // the board's answer to the majority vote
  double fresh_loss = 0;    // the majority vote's loss on fresh labels of the same distribution
  double kept = 0;          // random vectors the attacker kept
  // Leaderboard error max_t |B_t - 1/2| over the k submissions and the majority vote, B_t being
  // the board's best so far (for kaggle/subsample the smallest answer so far): every submission's
  // true loss is 1/2.
  double leaderboard_error = 0;
  // Standard deviations over seeds of holdout_loss and fresh_loss (for error bars and tests).
  double holdout_sd = 0, fresh_sd = 0;
};

std::vector<BoostingAttackPoint> run_boosting_attack(const BoostingAttackOptions& options);

// The Ladder's bound on the leaderboard error, (ln(k n) / n)^(1/3) (Blum & Hardt, Theorem 3.1,
// with the constant taken as 1): the scale of the step eta the analysis asks for.
double ladder_error_bound(double k, double n);

}  // namespace nanogpt
