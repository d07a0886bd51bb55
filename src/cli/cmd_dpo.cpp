// `nanogpt dpo`: direct preference optimization of a checkpoint (posttrain/dpo.hpp).
#include <cstdio>

#include "cli/commands.hpp"
#include "cli/posttrain_args.hpp"
#include "posttrain/dpo.hpp"
#include "runtime/error.hpp"

namespace nanogpt::cli {

void register_dpo(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "dpo",
      "Direct preference optimization: prefer each pair's chosen reply over its rejected one, "
      "against the starting checkpoint as the reference (sigmoid, ipo or hinge loss)");
  struct Args {
    DpoOptions o;
    std::string out, loss = "sigmoid";
  };
  auto a = std::make_shared<Args>();
  DpoOptions& opts = a->o;
  cmd->add_option("--checkpoint", opts.checkpoint,
                  "The policy to start from (and the reference), or a run directory");
  cmd->add_option("--tokenizer", opts.tokenizer,
                  "Tokenizer (default: the one recorded with the checkpoint)");
  cmd->add_option("--pairs", opts.pairs,
                  "Preference pairs, one JSON object per line: {\"prompt\": ..., \"chosen\": ..., "
                  "\"rejected\": ...}");
  cmd->add_option("--tasks", opts.tasks,
                  "Or build the pairs on-policy: sample the checkpoint on this mixture's train "
                  "problems, pair each problem's best completion (by the verifier) with its worst");
  cmd->add_option("--pair-problems", opts.policy_pairs.problems, "On-policy: problems sampled")
      ->capture_default_str();
  cmd->add_option("--pair-group", opts.policy_pairs.group_size,
                  "On-policy: completions per problem")
      ->capture_default_str();
  cmd->add_option("--pair-max-tokens", opts.policy_pairs.max_tokens,
                  "On-policy: longest completion")
      ->capture_default_str();
  cmd->add_option("--pair-temperature", opts.policy_pairs.temperature,
                  "On-policy: sampling temperature")
      ->capture_default_str();
  cmd->add_option("--out", a->out, "Run directory (metrics.jsonl, run.json, checkpoints/)")
      ->required();
  cmd->add_flag("--resume", opts.resume, "Continue from the newest checkpoint in --out");
  cmd->add_option("--loss", a->loss, "sigmoid (DPO), ipo or hinge")->capture_default_str();
  cmd->add_option("--beta", opts.loss.beta, "β: how far from the reference (> 0)")
      ->capture_default_str();
  cmd->add_option("--epochs", opts.epochs, "Passes over the pairs")->capture_default_str();
  cmd->add_option("--pairs-per-step", opts.pairs_per_step, "Pairs per optimizer step")
      ->capture_default_str();
  cmd->add_option("--lr-scale", opts.lr_scale,
                  "Every learning rate as a fraction of pre-training's")
      ->capture_default_str();
  cmd->add_option("--seed", opts.seed, "Pair order")->capture_default_str();
  cmd->add_option("--checkpoint-every", opts.checkpoint_every,
                  "Checkpoint every N steps (0: at the end; Ctrl-C always checkpoints)")
      ->capture_default_str();
  cmd->add_option("--eval-tasks", opts.eval_tasks,
                  "Held-out task pass@1 before and after (a task mixture, e.g. addition:1)");
  cmd->add_option("--eval-problems", opts.eval.problems_per_cell,
                  "Held-out test problems per family and level")
      ->capture_default_str();
  add_checkpoint_window_option(cmd, opts.window_blocks);
  cmd->callback([a] {
    DpoOptions o = a->o;
    o.run_dir = a->out;
    o.loss.kind = parse_dpo_loss_kind(a->loss);
    const PosttrainTokenizer tok =
        resolve_posttrain_args("dpo", o.checkpoint, a->out, o.resume, o.tokenizer);
    o.tokenizer = tok.spec;
    o.tokenizer_record = tok.record;
    o.command_line =
        "nanogpt dpo --checkpoint " + o.checkpoint + " --pairs " + o.pairs + " --out " + a->out;
    const DpoRunResult r = run_dpo(o);
    std::printf("%s\n", r.last_checkpoint.c_str());
  });
}

}  // namespace nanogpt::cli
