#include "eval/submission.hpp"

#include <charconv>
#include <cmath>

#include "eval/row_file.hpp"
#include "runtime/error.hpp"
#include "runtime/file_io.hpp"
#include "runtime/sha256.hpp"

namespace nanogpt {

std::string_view loss_kind_name(LossKind kind) {
  return kind == LossKind::kZeroOne ? "zero-one" : "brier";
}

LossKind parse_loss_kind(std::string_view name) {
  if (name == "zero-one") return LossKind::kZeroOne;
  if (name == "brier") return LossKind::kBrier;
  throw InputError("unknown loss '" + std::string(name) + "'; valid losses: zero-one, brier");
}

void check_loss_fits_holdout(LossKind kind, const Holdout& holdout) {
  if (kind == LossKind::kBrier && holdout.num_classes > 2) {
    throw InputError("the brier loss scores binary holdouts, but '" + holdout.path +
                     "' has labels other than 0 and 1; use --loss zero-one, or relabel it as 0/1");
  }
}

namespace {

[[noreturn]] void bad_row(const std::string& path, size_t row, LossKind kind,
                          std::string_view text) {
  const std::string want =
      kind == LossKind::kZeroOne
          ? "a class id (a non-negative integer): this board scores with the zero-one loss"
          : "a probability of class 1 in [0, 1]: this board scores with the brier loss";
  throw InputError("submission '" + path + "' row " + std::to_string(row) + " is '" +
                   std::string(text.substr(0, 40)) + "', not " + want);
}

}  // namespace

ScoredSubmission score_submission(const std::string& path, const Holdout& holdout, LossKind kind) {
  return score_predictions(path, read_file(path), holdout, kind);
}

ScoredSubmission score_predictions(const std::string& path, const std::string& contents,
                                   const Holdout& holdout, LossKind kind) {
  ScoredSubmission s;
  s.path = path;
  s.sha256 = sha256_hex(contents);
  const std::vector<std::string_view> rows = split_rows(contents);
  if (rows.size() != holdout.labels.size()) {
    throw InputError("submission '" + path + "' has " + std::to_string(rows.size()) +
                     " rows but the holdout has " + std::to_string(holdout.labels.size()) +
                     "; give exactly one prediction per holdout row, one per line");
  }
  s.losses.resize(rows.size());
  double sum = 0;
  for (size_t i = 0; i < rows.size(); ++i) {
    const std::string_view row = rows[i];
    const char* first = row.data();
    const char* last = row.data() + row.size();
    const double label = holdout.labels[i];
    double loss = 0;
    if (kind == LossKind::kZeroOne) {
      int64_t id = -1;
      const auto [end, ec] = std::from_chars(first, last, id);
      if (row.empty() || ec != std::errc() || end != last || id < 0)
        bad_row(path, i + 1, kind, row);
      loss = static_cast<double>(id) == label ? 0.0 : 1.0;
    } else {
      double p = -1;
      const auto [end, ec] = std::from_chars(first, last, p);
      if (row.empty() || ec != std::errc() || end != last || !(p >= 0.0 && p <= 1.0)) {
        bad_row(path, i + 1, kind, row);
      }
      loss = (p - label) * (p - label);
    }
    s.losses[i] = loss;
    sum += loss;
  }
  s.mean_loss = sum / static_cast<double>(rows.size());
  return s;
}

}  // namespace nanogpt
