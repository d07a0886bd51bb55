// `nanogpt eval`: validation loss of a checkpoint.
#include <cstdio>
#include <nlohmann/json.hpp>

#include "cli/commands.hpp"
#include "model/model_io.hpp"
#include "runtime/checkpoint.hpp"
#include "runtime/comm.hpp"
#include "runtime/error.hpp"
#include "runtime/profiler.hpp"
#include "train/attention_window.hpp"
#include "train/evaluate.hpp"

namespace nanogpt::cli {

void register_eval(CLI::App& app) {
  auto* cmd =
      app.add_subcommand("eval", "Mean validation loss of a checkpoint; prints one JSON line");
  struct Args {
    std::string checkpoint, val, profile;
    int64_t tokens = 0, seq_len = 0, window = 0;
  };
  auto a = std::make_shared<Args>();
  cmd->add_option("--checkpoint", a->checkpoint,
                  "A checkpoint directory, or a run directory (its newest checkpoint)")
      ->required();
  cmd->add_option("--val", a->val, "Glob of validation shards")->required();
  cmd->add_option("--tokens", a->tokens,
                  "Tokens to evaluate, a multiple of the sequence length (default: the run's "
                  "val_tokens)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 40));
  cmd->add_option("--seq-len", a->seq_len, "Sequence length (default: the run's val_seq_len)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 24));
  add_checkpoint_window_option(cmd, a->window);
  cmd->add_option("--profile", a->profile,
                  "Write a Chrome trace of the evaluation to this file (open in ui.perfetto.dev) "
                  "and print where the time went to stderr");
  cmd->callback([a] {
    const std::string dir = require_checkpoint(a->checkpoint);
    auto model = load_model(dir);
    const Config& c = model->config();
    int64_t seq = a->seq_len > 0 ? a->seq_len : c.val_seq_len;
    int64_t tokens = a->tokens > 0 ? a->tokens : c.val_tokens;
    const int64_t window = a->window > 0 ? a->window : attention_window_at(c, c.num_iterations);
    // Under mpirun each rank scores a slice; rank 0 profiles and prints.
    Comm& comm = Comm::world();
    ProfileSession profile(comm.is_root() ? a->profile : std::string());
    EvalResult r = evaluate(*model, a->val, tokens, seq, window, comm);
    profile.finish();
    if (!comm.is_root()) return;
    nlohmann::ordered_json j;
    j["val_loss"] = r.loss;
    j["tokens"] = r.tokens;
    std::printf("%s\n", j.dump().c_str());
  });
}

}  // namespace nanogpt::cli
