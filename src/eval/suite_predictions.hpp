// A checkpoint submitted to a leaderboard (issue 17, item 7): a choice suite, one case per
// holdout row in the holdout's order, run on the checkpoint (suite_runner.hpp), and its report
// turned into the predictions a submitter's file would hold, so the board scores both kinds of
// submission through the same code (submission.hpp).
//
// zero-one boards: a row's prediction is the class id = the index of the case's most likely
// choice by summed log-likelihood (the rule of the `acc` evaluator; ties to the first).
// brier boards (binary): each case has exactly two choices and the prediction is the model's
// probability of choice 1 between the two, 1 / (1 + exp(ll_0 - ll_1)).
// The suite's own gold indices play no part: the labels are the board's holdout.
#pragma once

#include <string>

#include "eval/eval_report.hpp"
#include "eval/submission.hpp"
#include "eval/suite.hpp"

namespace nanogpt {

// Checks, before any model runs, that `suite` can make a submission to a board of `kind` with
// `rows` holdout rows: as many cases as rows, every case a choice case, two choices each on a
// brier board. An InputError names `suite_path`, the case and what to change.
void check_suite_for_submission(const Suite& suite, LossKind kind, size_t rows,
                                const std::string& suite_path);

// One prediction per line, one line per case in the report's order. A case that is not a
// choice case, a brier case without exactly two choices, or a non-finite log-likelihood is an
// InputError naming `suite_path` and the case.
std::string predictions_from_report(const EvalReport& report, LossKind kind,
                                    const std::string& suite_path);

}  // namespace nanogpt
