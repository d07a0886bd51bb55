// `nanogpt speedrun`: the CPU speedrun track. Trains a configuration on the fortunes corpus until
// the validation loss reaches the target, and prints the record as one JSON line: training
// seconds (the steps only; validation and checkpoints excluded, as modded-nanogpt times its
// runs), steps, tokens and the loss reached.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "cli/commands.hpp"
#include "config/config.hpp"
#include "data/fortunes_corpus.hpp"
#include "runtime/build_info.hpp"
#include "runtime/comm.hpp"
#include "runtime/cpu_info.hpp"
#include "runtime/error.hpp"
#include "runtime/file_io.hpp"
#include "runtime/thread_pool.hpp"
#include "train/shard_meta.hpp"
#include "train/trainer.hpp"

namespace nanogpt::cli {

namespace {

std::string timestamped_run_dir() {
  char buf[64];
  const std::time_t now = std::time(nullptr);
  std::strftime(buf, sizeof buf, "data/speedrun/run-%Y%m%d-%H%M%S", std::gmtime(&now));
  return buf;
}

}  // namespace

void register_speedrun(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "speedrun",
      "Train until the validation loss reaches a target (default 4.85) and print the training "
      "time, steps, tokens and loss as one JSON line");
  struct Args {
    std::string config = "cpu";
    std::vector<std::string> sets;
    double target = 4.85;
    int64_t val_every = 10;
    std::string data = "data/fortunes";
    std::string out;
    bool no_chat_tokens = false;
  };
  auto a = std::make_shared<Args>();
  cmd->add_option("--config", a->config, "Preset or JSON configuration file")
      ->capture_default_str();
  cmd->add_option("--set", a->sets, "Override a configuration key: --set key=value (repeatable)");
  cmd->add_option("--target", a->target, "Validation loss to reach")->capture_default_str();
  cmd->add_option("--val-every", a->val_every,
                  "Validate every N steps (unless --set val_loss_every=... is given)")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 30));
  cmd->add_option("--data", a->data,
                  "Fortunes corpus directory (prepared there if missing: nanogpt prepare fortunes)")
      ->capture_default_str();
  cmd->add_option("--out", a->out,
                  "Run directory (default: data/speedrun/run-DATE-TIME); must not exist");
  cmd->add_flag("--no-chat-tokens", a->no_chat_tokens,
                "When the corpus is prepared here, train its tokenizer without the four chat "
                "tokens (nanogpt prepare fortunes --help)");
  cmd->callback([a] {
    if (!std::isfinite(a->target)) throw InputError("--target must be a finite loss, e.g. 4.85");
    Comm& world = Comm::world();
    // Rank 0 prepares what is missing; under mpirun the others wait, then find it there.
    if (world.is_root()) prepare_fortunes(a->data, !a->no_chat_tokens);
    world.barrier("corpus prepared");
    const PreparedCorpus corpus = prepare_fortunes(a->data, !a->no_chat_tokens);
    ConfigOrigins origins;
    Config config = load_config(a->config, &origins);
    for (const auto& s : a->sets) set_config_value(config, s, &origins);
    if (!origins.count("val_loss_every")) config.val_loss_every = a->val_every;
    if (auto meta = read_shard_meta(corpus.train_pattern)) apply_shard_meta(config, origins, *meta);
    validate_config(config);
    const std::string out = a->out.empty() ? timestamped_run_dir() : a->out;
    if (world.is_root() && std::filesystem::exists(out)) {
      throw InputError("--out " + out + " exists; a speedrun starts fresh: give a new directory");
    }
    TrainOptions o;
    o.config = config;
    o.train_pattern = corpus.train_pattern;
    o.val_pattern = corpus.val_pattern;
    o.run_dir = out;
    o.target_val_loss = a->target;
    o.command_line = "nanogpt speedrun --config " + a->config;
    for (const auto& s : a->sets) o.command_line += " --set " + s;
    o.command_line += " --target " + std::to_string(a->target) + " --out " + out;
    const double load_before = load_average();
    const TrainResult r = train(o);
    if (!world.is_root()) return;
    nlohmann::ordered_json j;
    j["reached"] = r.reached_target;
    j["target"] = a->target;
    j["val_loss"] = r.final_val_loss;
    j["train_seconds"] = r.train_seconds;
    j["steps"] = r.final_step;
    j["tokens"] = r.trained_tokens;
    j["interrupted"] = r.interrupted;
    j["config"] = a->config;
    j["sets"] = a->sets;
    j["seed"] = config.seed;
    j["val_tokens"] = config.val_tokens;
    j["val_every"] = config.val_loss_every;
    j["ranks"] = world.size();
    j["threads"] = ThreadPool::current().size();
    j["cpu"] = cpu_info().model_name;
    j["revision"] = build_revision();
    j["loadavg_before"] = load_before;
    j["loadavg_after"] = load_average();
    j["run_dir"] = out;
    // The same line in the run directory, so the directory alone is a record (records/).
    write_file_atomic(out + "/speedrun.json", j.dump() + "\n");
    std::printf("%s\n", j.dump().c_str());
    if (!r.reached_target && !r.interrupted) {
      std::fprintf(stderr,
                   "did not reach %.4f in %lld steps (validation loss %.4f): raise num_iterations "
                   "or change the recipe\n",
                   a->target, static_cast<long long>(r.final_step), r.final_val_loss);
    }
  });
}

}  // namespace nanogpt::cli
