// `nanogpt train`: the seed's training recipe, configured by preset or JSON plus --set.
#include <cmath>
#include <cstdio>

#include "cli/commands.hpp"
#include "runtime/comm.hpp"
#include "runtime/error.hpp"
#include "runtime/profiler.hpp"
#include "train/shard_meta.hpp"
#include "train/trainer.hpp"

namespace nanogpt::cli {

void register_train(CLI::App& app) {
  auto* cmd =
      app.add_subcommand("train", "Train a GPT with the modded-nanogpt recipe (Muon + Adam)");
  struct Args {
    std::string config = "cpu";
    std::vector<std::string> sets;
    std::string train, val, out, profile;
    bool resume = false, print_config = false;
    int64_t max_steps = 0;
  };
  auto a = std::make_shared<Args>();
  cmd->add_option("--config", a->config, "Preset (speedrun, cpu) or a JSON configuration file")
      ->capture_default_str();
  cmd->add_option("--set", a->sets, "Override a configuration key: --set key=value (repeatable)");
  cmd->add_flag("--print-config", a->print_config,
                "Print the resolved configuration as JSON and exit");
  cmd->add_option("--train", a->train,
                  "Glob of training shards, e.g. 'data/fortunes/shards/train_*.bin'");
  cmd->add_option("--val", a->val, "Glob of validation shards");
  cmd->add_option("--out", a->out, "Run directory (metrics.jsonl, run.json, checkpoints/)");
  cmd->add_flag("--resume", a->resume, "Continue from the newest complete checkpoint in --out");
  cmd->add_option("--max-steps", a->max_steps,
                  "Stop with a checkpoint after this many steps of this invocation (resume "
                  "later); 0: no limit")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 40));
  cmd->add_option("--profile", a->profile,
                  "Write a Chrome trace of the run to this file (open in ui.perfetto.dev) and "
                  "print where the time went to stderr; also on Ctrl-C");
  cmd->callback([a] {
    ConfigOrigins origins;
    Config config = load_config(a->config, &origins);
    for (const auto& s : a->sets) set_config_value(config, s, &origins);
    // vocab_size and eot_id from the shards' tokenizer unless set (a 1024-token tokenizer
    // then trains without --set).
    if (!a->train.empty()) {
      if (auto meta = read_shard_meta(a->train)) apply_shard_meta(config, origins, *meta);
    }
    validate_config(config);
    if (a->print_config) {
      std::printf("%s\n", config_to_json(config).dump(2).c_str());
      return;
    }
    for (auto [flag, value] :
         {std::pair{"--train", &a->train}, {"--val", &a->val}, {"--out", &a->out}}) {
      if (value->empty())
        throw InputError(std::string(flag) + " is required (see nanogpt train --help)");
    }
    TrainOptions o;
    o.config = config;
    o.train_pattern = a->train;
    o.val_pattern = a->val;
    o.run_dir = a->out;
    o.resume = a->resume;
    o.max_steps = a->max_steps;
    o.command_line = "nanogpt train --config " + a->config;
    for (const auto& s : a->sets) o.command_line += " --set " + s;
    o.command_line += " --train '" + a->train + "' --val '" + a->val + "' --out " + a->out;
    // Under mpirun, rank 0 profiles and prints; the others train in silence.
    const bool root = Comm::world().is_root();
    ProfileSession profile(root ? a->profile : std::string());
    TrainResult r = train(o);
    profile.finish();
    if (r.interrupted || !root) return;
    if (r.steps_run == 0) {
      std::printf("nothing to do: %s is complete (val loss %.4f)\n", r.last_checkpoint.c_str(),
                  r.final_val_loss);
      return;
    }
    std::printf(
        "trained %lld steps (final step %lld): train loss %.4f, val loss %.4f, %.0f tokens/s\n",
        static_cast<long long>(r.steps_run), static_cast<long long>(r.final_step),
        r.final_train_loss, r.final_val_loss, r.tokens_per_second);
    std::printf("checkpoint: %s\n", r.last_checkpoint.c_str());
  });
}

}  // namespace nanogpt::cli
