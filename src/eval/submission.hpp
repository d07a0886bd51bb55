// A submission to a leaderboard: one prediction per holdout row, scored row by row into losses
// in [0, 1] that the mechanisms (leaderboard_mechanism.hpp) turn into public answers.
//
// Two losses, fixed when the board is created:
// - zero-one: predictions are class ids; a row's loss is 1 if it differs from the label.
// - brier: binary holdouts only; predictions are probabilities of class 1 and a row's loss is
//   (p - y)^2. Brier rather than log loss because it is bounded in [0, 1]: the Ladder's analysis
//   and Blanc's votes (a Bernoulli draw with the row's loss as its probability) need a bounded
//   loss, and a 0/1 prediction scores exactly its zero-one loss.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "eval/holdout.hpp"

namespace nanogpt {

enum class LossKind { kZeroOne, kBrier };

std::string_view loss_kind_name(LossKind kind);
// "zero-one" or "brier"; anything else is an InputError listing both.
LossKind parse_loss_kind(std::string_view name);

// Checks that `kind` can score `holdout` (brier needs labels in {0, 1}).
void check_loss_fits_holdout(LossKind kind, const Holdout& holdout);

struct ScoredSubmission {
  std::string path;
  std::string sha256;          // of the predictions file
  std::vector<double> losses;  // per holdout row, each in [0, 1]
  double mean_loss = 0;        // the exact private score
};

// Reads one prediction per line and scores it against the holdout. A file whose row count
// differs from the holdout's, or a row that is not a prediction of the board's kind, is an
// InputError naming the file, the counts or the row; labels never appear in a message.
ScoredSubmission score_submission(const std::string& path, const Holdout& holdout, LossKind kind);

// The same on predictions already in memory (a checkpoint's, suite_predictions.hpp); `source`
// stands for the file in the record and in messages.
ScoredSubmission score_predictions(const std::string& source, const std::string& contents,
                                   const Holdout& holdout, LossKind kind);

}  // namespace nanogpt
