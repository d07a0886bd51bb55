// Leaderboard mechanisms: how a board turns a submission's per-row losses on the holdout into
// the one public number the submitter sees. Lower is better (losses in [0, 1]).
//
// - kaggle: the empirical loss rounded to 5 decimals, for every submission. Precise answers are
//   what the boosting attack (boosting_attack.hpp) climbs without any skill.
// - ladder (Blum & Hardt 2015, Algorithm 1): the board shows R, initially +inf. A submission
//   whose loss is below R - eta moves R to that loss rounded to the nearest multiple of eta;
//   any other submission is answered with R unchanged.
// - ladder-free (their parameter-free Ladder): the threshold is the paired standard error
//   s/sqrt(n), s the sample standard deviation of the row-wise loss differences between the
//   submission and the current leader (of its own losses for the first submission, which always
//   leads). A new leader's loss is shown to 5 decimals.
// - subsample (Blanc, "Subsampling suffices for adaptive data analysis"): each answer is the
//   mean of `votes` votes, a vote drawing one holdout row uniformly (with replacement) and
//   answering 1 with the row's loss as probability (the loss itself for zero-one). Votes come
//   from an Rng seeded by (seed, submission number), so an answer is reproducible and needs no
//   saved generator state.
//
// "Beats by more than t" is `previous - loss > t + 1e-12`: an improvement of exactly t, which
// floating point may land on either side of, never counts (zero-one losses of n <= 2^31 rows
// differ by at least 2^-31, far above the slack; a brier improvement is misjudged only within
// 1e-12 of the threshold).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace nanogpt {

enum class MechanismKind { kKaggle, kLadder, kLadderFree, kSubsample };

std::string_view mechanism_name(MechanismKind kind);
// "kaggle", "ladder", "ladder-free" or "subsample"; anything else is an InputError listing them.
MechanismKind parse_mechanism(std::string_view name);
// Ladders answer with the best score so far; kaggle and subsample score each submission alone.
bool answers_best_so_far(MechanismKind kind);

struct MechanismParams {
  MechanismKind kind = MechanismKind::kKaggle;
  double eta = 0.01;     // ladder: the step
  int64_t votes = 1000;  // subsample: votes per answer
  uint64_t seed = 0;     // subsample: the votes' generator
};

// Checks the parameters the kind uses (eta in (0, 1], votes >= 1); InputError otherwise.
void validate_mechanism_params(const MechanismParams& params);

// What a mechanism remembers between submissions (saved in the leaderboard's state file).
struct MechanismMemory {
  int64_t answered = 0;               // submissions answered so far
  bool has_leader = false;            // ladders: whether a score is shown yet
  double shown = 0;                   // ladders: the score on the board
  double leader_loss = 0;             // ladder-free: the leader's exact loss
  std::vector<double> leader_losses;  // ladder-free: the leader's per-row losses
};

struct MechanismAnswer {
  double answer = 0;   // the public number
  bool leads = false;  // ladders: this submission moved the board (kaggle/subsample: false)
};

class LeaderboardMechanism {
 public:
  explicit LeaderboardMechanism(MechanismParams params, MechanismMemory memory = {});

  // Answers one submission from its per-row losses (each in [0, 1]) and updates the memory.
  MechanismAnswer answer(std::span<const double> losses);
  // As answer(), for a submission whose empirical loss the caller already has (the attack
  // counts it with popcount): identical results.
  MechanismAnswer answer(std::span<const double> losses, double mean_loss);

  const MechanismParams& params() const { return params_; }
  const MechanismMemory& memory() const { return memory_; }

 private:
  MechanismParams params_;
  MechanismMemory memory_;
};

// The mean of `losses`, summed in row order (the private score).
double mean_loss(std::span<const double> losses);
// Rounds to the nearest multiple of `step` (kaggle: 1e-5; ladder: eta).
double round_to_step(double value, double step);

}  // namespace nanogpt
