#include "posttrain/stage_ranks.hpp"

#include <algorithm>

#include "runtime/error.hpp"
#include "train/rank_agreement.hpp"

namespace nanogpt {

Comm& stage_comm(Comm* chosen) {
  return chosen != nullptr ? *chosen : Comm::world();
}

void sum_gradients(Comm& comm, std::span<float> grads) {
  if (!comm.distributed()) return;
  comm.wait(comm.start_allreduce_sum(grads, "gradient sum"));
}

std::vector<double> gather_by_rank(Comm& comm, std::span<const double> mine, int64_t first,
                                   int64_t total, const std::string& what) {
  if (first < 0 || first + static_cast<int64_t>(mine.size()) > total) {
    throw Error("gather_by_rank: " + what + ": items [" + std::to_string(first) + ", " +
                std::to_string(first + static_cast<int64_t>(mine.size())) + ") outside [0, " +
                std::to_string(total) + ")");
  }
  std::vector<double> all(static_cast<size_t>(total), 0.0);
  std::copy(mine.begin(), mine.end(), all.begin() + first);
  comm.sum_in_place(all, what);
  return all;
}

void check_stage_ranks_agree(Comm& comm, const std::string& stage, const std::string& options,
                             const std::string& checkpoint) {
  check_ranks_agree(comm, {{"the nanogpt binary", executable_digest()},
                           {"the " + stage + " options", options},
                           {"the checkpoint to start from", checkpoint}});
}

std::optional<RunDirectory> open_stage_run_directory(
    Comm& comm, const std::string& stage, const std::string& run_dir, bool resume,
    int64_t resume_step, nlohmann::ordered_json fields, const PosttrainStart& start,
    const nlohmann::json& tokenizer_record, const std::string& command_line) {
  if (!comm.is_root()) return std::nullopt;
  std::optional<RunDirectory> run(std::in_place, run_dir);
  if (resume) {
    run->truncate_metrics(resume_step);
  } else {
    run->start_metrics();
    fields["ranks"] = comm.size();
    write_posttrain_run_record(run_dir, stage, std::move(fields), start, tokenizer_record,
                               command_line);
  }
  return run;
}

}  // namespace nanogpt
