// A leaderboard's whole state in one JSON file: the holdout it scores against (path and sha256
// of the labels), the loss, the mechanism and its parameters, the mechanism's memory and the
// history of every submission with its private score and public answer.
//
// The file is the host's, as private as the labels: it holds exact private scores (and, for
// ladder-free, the leader's per-row losses). `nanogpt leaderboard show` prints only its public
// part: names, times and answers.
// It is written atomically after each submission; reading one that does not parse, misses a
// field or contradicts itself is an InputError naming the file and the field — never a fresh
// board — and leaves the file as it was.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "eval/holdout.hpp"
#include "eval/leaderboard_mechanism.hpp"
#include "eval/submission.hpp"

namespace nanogpt {

struct SubmissionRecord {
  int64_t number = 0;        // 1, 2, ... in order of arrival
  std::string name;          // the submitter's label for it
  std::string file;          // the predictions file as given
  std::string sha256;        // of the predictions file
  std::string time;          // UTC, ISO 8601
  double private_score = 0;  // exact empirical loss on the holdout: never shown
  double answer = 0;         // what the board answered
  bool leads = false;        // ladders: whether it moved the board
};

struct LeaderboardState {
  std::string holdout_path;  // absolute
  std::string holdout_sha256;
  int64_t rows = 0;
  LossKind loss = LossKind::kZeroOne;
  MechanismParams mechanism;
  MechanismMemory memory;
  std::vector<SubmissionRecord> submissions;
};

// A new board on `holdout` (checked against the loss) with no submissions.
LeaderboardState new_leaderboard(const Holdout& holdout, LossKind loss, MechanismParams mechanism);

// The state as JSON text (stable key order, so a load and a save give the same bytes).
std::string leaderboard_state_json(const LeaderboardState& state);
// Parses and checks a state; `path` names the file in errors.
LeaderboardState parse_leaderboard_state(const std::string& text, const std::string& path);

LeaderboardState load_leaderboard_state(const std::string& path);
void save_leaderboard_state(const LeaderboardState& state, const std::string& path);

// Loads the board's holdout and checks it is the one the board was created on (same sha256).
Holdout load_board_holdout(const LeaderboardState& state, const std::string& state_path);

// Holds an exclusive flock on the directory of a state file while it lives, so two `submit`s on
// one board run one after the other instead of one overwriting the other's answer (the state
// is replaced by rename, so a lock on the file itself would not survive a save).
class LeaderboardLock {
 public:
  explicit LeaderboardLock(const std::string& state_path);
  ~LeaderboardLock();
  LeaderboardLock(const LeaderboardLock&) = delete;
  LeaderboardLock& operator=(const LeaderboardLock&) = delete;

 private:
  int fd_ = -1;
};

// Scores and answers one submission, appending it to the history. On any error (wrong length,
// a bad row) the state is unchanged.
const SubmissionRecord& submit_to_leaderboard(LeaderboardState& state, const Holdout& holdout,
                                              const std::string& predictions_path,
                                              const std::string& name, const std::string& time);

// Answers a submission already scored (score_predictions: a checkpoint's predictions),
// appending it to the history.
const SubmissionRecord& submit_scored(LeaderboardState& state, const ScoredSubmission& scored,
                                      const std::string& name, const std::string& time);

}  // namespace nanogpt
