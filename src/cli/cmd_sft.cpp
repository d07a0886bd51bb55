// `nanogpt sft`: supervised fine-tuning of a checkpoint on conversations (posttrain/sft.hpp).
#include <cstdio>

#include "cli/commands.hpp"
#include "cli/posttrain_args.hpp"
#include "posttrain/sft.hpp"
#include "runtime/error.hpp"

namespace nanogpt::cli {

void register_sft(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "sft",
      "Supervised fine-tuning: teach a checkpoint conversations in the chat format (a JSONL "
      "file, or task problems with their answers), loss on the assistant's tokens only");
  struct Args {
    SftOptions o;
    std::string out;
  };
  auto a = std::make_shared<Args>();
  SftOptions& opts = a->o;
  cmd->add_option("--checkpoint", opts.checkpoint,
                  "The checkpoint to start from, or a run directory (its newest checkpoint)");
  cmd->add_option("--tokenizer", opts.tokenizer,
                  "Tokenizer (default: the one recorded with the checkpoint)");
  cmd->add_option("--data", opts.data,
                  "Conversations, one JSON object per line: {\"messages\": [{\"role\": \"user\", "
                  "\"content\": ...}, {\"role\": \"assistant\", ...}, ...]}");
  cmd->add_option("--tasks", opts.tasks,
                  "Or a task mixture whose train problems become conversations, e.g. "
                  "addition:1-2,sort:1 (nanogpt evals tasks lists the families)");
  cmd->add_option("--examples", opts.examples_per_cell, "Task conversations per family and level")
      ->capture_default_str();
  cmd->add_option("--out", a->out, "Run directory (metrics.jsonl, run.json, checkpoints/)")
      ->required();
  cmd->add_flag("--resume", opts.resume, "Continue from the newest checkpoint in --out");
  cmd->add_option("--epochs", opts.epochs, "Passes over the conversations")->capture_default_str();
  cmd->add_option("--rows-per-step", opts.rows_per_step, "Packed rows per optimizer step")
      ->capture_default_str();
  cmd->add_option("--seq-len", opts.seq_len,
                  "Tokens per row (default: the checkpoint's train_seq_len); a multiple of its "
                  "block_size");
  cmd->add_option("--lr-scale", opts.lr_scale,
                  "Every learning rate as a fraction of pre-training's")
      ->capture_default_str();
  cmd->add_option("--cooldown", opts.cooldown_frac,
                  "Fraction of the steps over which the rates fall (1: from the start)")
      ->capture_default_str();
  cmd->add_option("--seed", opts.seed, "Row order and generated problems")->capture_default_str();
  cmd->add_option("--checkpoint-every", opts.checkpoint_every,
                  "Checkpoint every N steps (0: at the end only; Ctrl-C always checkpoints)")
      ->capture_default_str();
  cmd->add_option("--eval-every", opts.eval_every,
                  "With --tasks: held-out pass@1 every N steps (always before and after)")
      ->capture_default_str();
  cmd->add_option("--eval-problems", opts.eval.problems_per_cell,
                  "Held-out test problems per family and level")
      ->capture_default_str();
  cmd->add_option("--eval-max-tokens", opts.eval.max_tokens, "Longest reply in evaluation")
      ->capture_default_str();
  cmd->add_flag(
      "--no-eval", [a](int64_t) { a->o.evaluate = false; }, "Skip the held-out evaluation");
  add_checkpoint_window_option(cmd, opts.window_blocks);
  cmd->callback([a] {
    SftOptions o = a->o;
    o.run_dir = a->out;
    const PosttrainTokenizer tok =
        resolve_posttrain_args("sft", o.checkpoint, a->out, o.resume, o.tokenizer);
    o.tokenizer = tok.spec;
    o.tokenizer_record = tok.record;
    o.command_line = "nanogpt sft --checkpoint " + o.checkpoint + " --out " + a->out +
                     (o.data.empty() ? " --tasks " + o.tasks : " --data " + o.data);
    const SftResult r = run_sft(o);
    std::printf("%s\n", r.last_checkpoint.c_str());
  });
}

}  // namespace nanogpt::cli
