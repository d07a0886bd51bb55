// A post-training stage (sft, dpo, rl) over MPI ranks, the way `train` spreads a step: every
// rank holds the whole model and the optimizer's share of its state (GptOptimizer on the
// stage's Comm), takes a contiguous slice of each step's work (packed rows, pairs, prompts:
// even_slice), and the ranks' gradients are summed before the optimizer step, so every rank
// ends the step with the same parameters. A stage's losses are normalised by the whole step's
// counts (tokens, pairs, sequences), never a rank's, so N ranks compute the single process's
// update up to the order of the float sums. Rank 0 alone writes (run.json, metrics.jsonl,
// checkpoints, curves) and prints; every rank joins the collectives (optimizer state export
// for a checkpoint, the stop agreement).
//
// Gradients are summed by one all-reduce after the step's backward passes rather than in
// buckets during the last one (train's GradientReducer): a rank whose slice of a step is empty
// runs no backward at all, and a post-training step's time is mostly sampling and scoring.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <optional>

#include "posttrain/posttrain_checkpoint.hpp"
#include "runtime/comm.hpp"
#include "train/run_directory.hpp"

namespace nanogpt {

// The ranks a stage runs on: `chosen`, or the job's world (Comm::world()) when null.
Comm& stage_comm(Comm* chosen);

// Sums `grads` over the ranks in place (every rank gets the sum). A no-op on one rank.
void sum_gradients(Comm& comm, std::span<float> grads);

// Every rank's `mine` concatenated by rank: rank r holds the items [first_r, first_r + size_r)
// of `total`. Exact (each item is summed with zeros only).
std::vector<double> gather_by_rank(Comm& comm, std::span<const double> mine, int64_t first,
                                   int64_t total, const std::string& what);

// At start: the ranks run the same binary on the same stage options (check_ranks_agree), so
// their collectives match; InputError naming what differs otherwise.
void check_stage_ranks_agree(Comm& comm, const std::string& stage, const std::string& options,
                             const std::string& checkpoint);

// Rank 0's run directory as a stage begins: a resumed run's metrics cut back to `resume_step`; a
// fresh run's metrics started and run.json written (`fields`, then the ranks and what
// write_posttrain_run_record adds). Empty on the other ranks, which write nothing.
std::optional<RunDirectory> open_stage_run_directory(
    Comm& comm, const std::string& stage, const std::string& run_dir, bool resume,
    int64_t resume_step, nlohmann::ordered_json fields, const PosttrainStart& start,
    const nlohmann::json& tokenizer_record, const std::string& command_line);

}  // namespace nanogpt
