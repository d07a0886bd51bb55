// `nanogpt rl`: policy-gradient RL of a checkpoint on verifiable tasks (posttrain/rl.hpp).
#include <cstdio>

#include "cli/commands.hpp"
#include "cli/posttrain_args.hpp"
#include "posttrain/rl.hpp"
#include "runtime/error.hpp"

namespace nanogpt::cli {

void register_rl(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "rl",
      "Reinforcement learning with verifiable rewards: sample the policy on task prompts, score "
      "with the tasks' verifiers, update by policy gradient (GRPO, REINFORCE, PPO with a value "
      "head and GAE)");
  struct Args {
    RlOptions o;
    std::string out, estimator = "grpo", objective = "clipped", aggregation = "sequence_mean";
  };
  auto a = std::make_shared<Args>();
  RlOptions& opts = a->o;
  cmd->add_option("--checkpoint", opts.checkpoint,
                  "The policy to start from (an SFT checkpoint), or a run directory");
  cmd->add_option("--tokenizer", opts.tokenizer,
                  "Tokenizer (default: the one recorded with the checkpoint)");
  cmd->add_option("--tasks", opts.tasks,
                  "Task mixture of the prompts, rewarded by the tasks' verifiers, e.g. sort:1");
  cmd->add_option("--rubric", opts.rubric,
                  "Or a rubric file (nanogpt evals make-rubric): its prompts, rewarded by its "
                  "weighted criteria; builtin:fortune-answers for the built-in one");
  cmd->add_option("--judge", opts.judge,
                  "A checkpoint (or run directory) that answers the rubric's judge criteria "
                  "(P(\" Yes\") by log-likelihood)");
  cmd->add_option("--judge-tokenizer", opts.judge_tokenizer,
                  "The judge's tokenizer (default: the one recorded with its checkpoint)");
  cmd->add_option("--out", a->out, "Run directory (metrics.jsonl, run.json, checkpoints/)")
      ->required();
  cmd->add_flag("--resume", opts.resume, "Continue from the newest checkpoint in --out");
  cmd->add_option("--steps", opts.steps, "Batches of rollouts")->capture_default_str();
  cmd->add_option("--prompts", opts.prompts_per_step, "Prompts per step")->capture_default_str();
  cmd->add_option("--group", opts.group_size, "Completions per prompt")->capture_default_str();
  cmd->add_option("--max-tokens", opts.max_tokens, "Longest completion")->capture_default_str();
  cmd->add_option("--temperature", opts.temperature, "Sampling temperature (> 0)")
      ->capture_default_str();
  cmd->add_option("--estimator", a->estimator,
                  "Advantages: grpo, reinforce_group_mean, reinforce_ema, or ppo_gae (PPO: a "
                  "value head on the policy, GAE per token; with --aggregation token_mean for "
                  "PPO's recipe)")
      ->capture_default_str();
  cmd->add_option("--ema-decay", opts.ema_decay, "reinforce_ema's baseline decay")
      ->capture_default_str();
  cmd->add_option("--gamma", opts.gae.gamma, "ppo_gae: discount γ in [0, 1]")
      ->capture_default_str();
  cmd->add_option("--lam", opts.gae.lambda, "ppo_gae: GAE's λ in [0, 1]")->capture_default_str();
  cmd->add_option("--value-coef", opts.value_coef,
                  "ppo_gae: weight of the value loss's gradient into the trunk (0: the head "
                  "learns alone)")
      ->capture_default_str();
  cmd->add_option("--value-lr", opts.value_lr, "ppo_gae: the value head's Adam learning rate")
      ->capture_default_str();
  cmd->add_option("--value-clip", opts.value_clip,
                  "ppo_gae: ε_v, the value loss's clip around the batch's old values (0: none)")
      ->capture_default_str();
  cmd->add_flag("--whiten-advantages", opts.whiten_advantages,
                "ppo_gae: whiten GAE's advantages over the batch's completion tokens");
  cmd->add_option("--objective", a->objective,
                  "clipped (PPO/GRPO's ratio) or reinforce (no ratio, one update per batch)")
      ->capture_default_str();
  cmd->add_option("--clip-low", opts.loss.clip_low, "ε_low")->capture_default_str();
  cmd->add_option("--clip-high", opts.loss.clip_high, "ε_high (DAPO's clip-higher: 0.28)")
      ->capture_default_str();
  cmd->add_option("--kl", opts.loss.kl_coef, "β of the k3 KL penalty to the starting policy")
      ->capture_default_str();
  cmd->add_option("--aggregation", a->aggregation,
                  "sequence_mean (GRPO), token_mean (DAPO) or constant (Dr. GRPO)")
      ->capture_default_str();
  cmd->add_option("--updates", opts.updates_per_batch, "Optimizer steps per batch (μ)")
      ->capture_default_str();
  cmd->add_option("--lr-scale", opts.lr_scale,
                  "Every learning rate as a fraction of pre-training's")
      ->capture_default_str();
  cmd->add_option("--seed", opts.seed, "Prompts and samples")->capture_default_str();
  cmd->add_option("--checkpoint-every", opts.checkpoint_every,
                  "Checkpoint every N steps (0: at the end; Ctrl-C always checkpoints)")
      ->capture_default_str();
  cmd->add_option("--eval-every", opts.eval_every,
                  "Held-out pass@1 every N steps (and at the ends)")
      ->capture_default_str();
  cmd->add_option("--eval-problems", opts.eval.problems_per_cell,
                  "Held-out test problems per family and level")
      ->capture_default_str();
  cmd->add_option("--eval-samples", opts.eval.samples,
                  "Samples per held-out problem (1: greedy pass@1; n: pass@1 and pass@k at "
                  "--eval-temperature)")
      ->capture_default_str();
  cmd->add_option("--eval-k", opts.eval.k, "k of pass@k")->capture_default_str();
  cmd->add_option("--eval-temperature", opts.eval.temperature,
                  "Temperature of the held-out samples (0: greedy)")
      ->capture_default_str();
  cmd->add_flag(
      "--no-eval", [a](int64_t) { a->o.evaluate = false; }, "Skip the held-out evaluation");
  add_checkpoint_window_option(cmd, opts.window_blocks);
  cmd->callback([a] {
    RlOptions o = a->o;
    o.run_dir = a->out;
    o.estimator = parse_advantage_estimator(a->estimator);
    o.loss.objective = parse_policy_objective(a->objective);
    o.loss.aggregation.mode = parse_loss_aggregation(a->aggregation);
    o.eval.max_tokens = o.max_tokens;
    const PosttrainTokenizer tok =
        resolve_posttrain_args("rl", o.checkpoint, a->out, o.resume, o.tokenizer);
    o.tokenizer = tok.spec;
    o.tokenizer_record = tok.record;
    o.command_line = "nanogpt rl --checkpoint " + o.checkpoint +
                     (o.rubric.empty() ? " --tasks " + o.tasks : " --rubric " + o.rubric) +
                     (o.judge.empty() ? "" : " --judge " + o.judge) + " --out " + a->out;
    const RlResult r = run_rl(o);
    std::printf("%s\n", r.last_checkpoint.c_str());
  });
}

}  // namespace nanogpt::cli
