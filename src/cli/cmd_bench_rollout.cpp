// `nanogpt bench rollout`: how fast RL's sampling step runs (issue 18, item 7). The prompts are
// those `nanogpt rl` draws at its first step (the task mixture's train problems in the chat
// format), sampled by the same function rl runs (posttrain/rollouts.hpp): group_size
// completions per prompt, all decoded as one batch, or with --batch-one one sequence at a time
// for the batch-1 figure. Prints one JSON line; bench/rollout_vs_pytorch.py compares it with a
// PyTorch peer on the same prompt ids (--dump-prompts).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli/commands.hpp"
#include "data/bpe_tokenizer.hpp"
#include "data/chat_format.hpp"
#include "eval/model_scorer.hpp"
#include "kernels/gemm/microkernel.hpp"
#include "model/gpt.hpp"
#include "model/model_io.hpp"
#include "posttrain/posttrain_checkpoint.hpp"
#include "posttrain/rollouts.hpp"
#include "posttrain/task_conversations.hpp"
#include "runtime/build_info.hpp"
#include "runtime/cpu_info.hpp"
#include "runtime/error.hpp"
#include "runtime/file_io.hpp"
#include "runtime/profiler.hpp"
#include "runtime/thread_pool.hpp"
#include "train/attention_window.hpp"
#include "train/train_state.hpp"

namespace nanogpt::cli {

namespace {

using Clock = std::chrono::steady_clock;

double median_of(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t m = v.size() / 2;
  return v.size() % 2 == 1 ? v[m] : 0.5 * (v[m - 1] + v[m]);
}

struct RolloutBenchArgs {
  std::string checkpoint, tokenizer, tasks = "addition:1-2", precision;
  std::string dump_prompts, dump_completions, profile;
  int64_t prompts = 8, group = 8, max_tokens = 32, top_k = 0, repeats = 3, warmup = 1;
  int64_t window = 0;
  double temperature = 1.0;
  uint64_t seed = 0;
  bool batch_one = false;
};

void run_rollout_bench(const RolloutBenchArgs& a) {
  if (!(a.temperature >= 0) || !std::isfinite(a.temperature)) {
    throw InputError("bench rollout: --temperature must be >= 0 (0: greedy)");
  }
  const std::string dir = require_checkpoint(a.checkpoint);
  ProfileSession profile(a.profile, /*start_now=*/false);
  const std::string spec = checkpoint_tokenizer_spec(dir, a.tokenizer);
  const BpeTokenizer tokenizer = BpeTokenizer::load(spec);
  const ChatTokens chat = chat_tokens(tokenizer);
  const std::vector<TaskCell> cells = parse_task_mixture(a.tasks);
  Config config = read_checkpoint_config(dir);
  if (!a.precision.empty()) set_config_value(config, "precision=" + a.precision);
  check_chat_vocabulary(config, tokenizer, chat, spec);
  Gpt model(config);
  load_model_weights(model, dir);
  const Config& c = model.config();
  const int64_t window = a.window > 0 ? a.window : attention_window_at(c, c.num_iterations);

  // RL's first step: its problems, its prompts, its samples' generators.
  const std::vector<TaskInstance> problems = rollout_problems(cells, a.seed, 0, a.prompts);
  std::vector<std::vector<uint32_t>> prompts;
  int64_t prompt_tokens = 0;
  for (const TaskInstance& p : problems) {
    prompts.push_back(rollout_prompt(p, tokenizer, chat, c.train_seq_len, a.max_tokens));
    prompt_tokens += static_cast<int64_t>(prompts.back().size()) + 1;  // + the scorer's EOT
  }
  RolloutSampling settings;
  settings.group_size = a.group;
  settings.max_tokens = a.max_tokens;
  settings.sampling.temperature = a.temperature;
  settings.sampling.top_k = a.top_k;
  settings.seed = a.seed;
  settings.assistant_end = chat.assistant_end;
  const RolloutBatching batching =
      a.batch_one ? RolloutBatching::kOneAtATime : RolloutBatching::kBatched;

  ModelScorer scorer(model, window);
  std::vector<std::vector<GeneratedSample>> completions;
  // Warm-up repeats fill the scorer's caches and the pages behind them, as RL's steps after
  // its first find them; every repeat samples the same tokens (same seeds), so they time the
  // same work.
  for (int64_t r = 0; r < a.warmup; ++r)
    completions = sample_completions(scorer, prompts, settings, batching);
  std::vector<double> seconds;
  const double load_before = load_average();
  profile.start();
  for (int64_t r = 0; r < a.repeats; ++r) {
    const Clock::time_point t0 = Clock::now();
    {
      ProfileScope scope("rollout", "rollout", {a.prompts, a.group}, 0, 0);
      completions = sample_completions(scorer, prompts, settings, batching);
    }
    seconds.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
  }
  const double load_after = load_average();
  profile.finish();

  int64_t tokens = 0, ended = 0, hit_eot = 0;
  nlohmann::json dumped = nlohmann::json::array();
  for (const auto& group : completions) {
    nlohmann::json samples = nlohmann::json::array();
    for (const GeneratedSample& s : group) {
      tokens += sampled_tokens(s);
      ended += !s.tokens.empty() && s.tokens.back() == chat.assistant_end ? 1 : 0;
      hit_eot += s.hit_eot ? 1 : 0;
      std::vector<uint32_t> ids = s.tokens;
      if (s.hit_eot) ids.push_back(static_cast<uint32_t>(c.eot_id));
      samples.push_back(ids);
    }
    dumped.push_back(std::move(samples));
  }
  if (!a.dump_prompts.empty()) {
    const nlohmann::ordered_json j = {
        {"eot_id", c.eot_id}, {"assistant_end", chat.assistant_end}, {"prompts", prompts}};
    write_file_atomic(a.dump_prompts, j.dump() + "\n");
  }
  if (!a.dump_completions.empty()) {
    write_file_atomic(a.dump_completions, nlohmann::json({{"completions", dumped}}).dump() + "\n");
  }

  const double best = *std::min_element(seconds.begin(), seconds.end());
  const double median = median_of(seconds);
  // What the repeat multiplied out: batched, one prefill per prompt; one at a time, one per
  // sample (each sample then counts as a prompt of its own).
  FlopCount flops;
  if (a.batch_one) {
    for (size_t i = 0; i < prompts.size(); ++i) {
      for (const GeneratedSample& s : completions[i]) {
        const std::vector<GeneratedSample> one = {s};
        flops += rollout_flops(c, window, std::span(&prompts[i], 1), std::span(&one, 1));
      }
    }
  } else {
    flops = rollout_flops(c, window, prompts, completions);
  }
  const int64_t n = a.prompts * a.group;
  nlohmann::ordered_json j;
  j["bench"] = "rollout";
  j["checkpoint"] = dir;
  j["tasks"] = task_mixture_string(cells);
  j["batching"] = a.batch_one ? "one_at_a_time" : "batched";
  j["prompts"] = a.prompts;
  j["group"] = a.group;
  j["max_tokens"] = a.max_tokens;
  j["temperature"] = a.temperature;
  j["top_k"] = a.top_k;
  j["seed"] = a.seed;
  j["precision"] = precision_name(model.precision());
  j["repeats"] = a.repeats;
  j["warmup"] = a.warmup;
  j["tokens"] = tokens;  // sampled per repeat, <|assistant_end|> and <|endoftext|> included
  j["completions"] = n;
  j["mean_completion_tokens"] = static_cast<double>(tokens) / static_cast<double>(n);
  j["ended_fraction"] = static_cast<double>(ended) / static_cast<double>(n);
  j["eot_fraction"] = static_cast<double>(hit_eot) / static_cast<double>(n);
  j["mean_prompt_tokens"] = static_cast<double>(prompt_tokens) / static_cast<double>(a.prompts);
  j["seconds"] = seconds;
  j["best_s"] = best;
  j["median_s"] = median;
  j["tokens_per_s_best"] = static_cast<double>(tokens) / best;
  j["tokens_per_s_median"] = static_cast<double>(tokens) / median;
  j["gflop"] = flops.forward() / 1e9;
  j["flops"] = flops.to_json();
  j["gflop_per_s_best"] = flops.forward() / best / 1e9;
  j["threads"] = ThreadPool::current().size();
  j["isa"] = model.precision() == Precision::kBf16 ? active_bf16_microkernel().isa
                                                   : active_microkernel().isa;
  j["cpu"] = cpu_info().model_name;
  j["loadavg_before"] = load_before;
  j["loadavg_after"] = load_after;
  j["version"] = NANOGPT_VERSION;
  j["revision"] = build_revision();
  std::printf("%s\n", j.dump().c_str());
}

}  // namespace

void register_bench_rollout(CLI::App& bench) {
  auto* cmd = bench.add_subcommand(
      "rollout",
      "Time RL's sampling step (group completions of chat-format task prompts, batched or one "
      "sequence at a time); prints one JSON line with rollout tokens/s");
  auto a = std::make_shared<RolloutBenchArgs>();
  cmd->add_option("--checkpoint", a->checkpoint, "A checkpoint, or a run directory (its newest)")
      ->required();
  cmd->add_option("--tokenizer", a->tokenizer,
                  "Tokenizer with the chat tokens (default: the one recorded with the checkpoint)");
  cmd->add_option("--tasks", a->tasks, "Task mixture of the prompts, as `nanogpt rl --tasks`")
      ->capture_default_str();
  cmd->add_option("--prompts", a->prompts, "Prompts (RL's prompts per step)")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 16));
  cmd->add_option("--group", a->group, "Completions per prompt")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 16));
  cmd->add_option("--max-tokens", a->max_tokens, "Longest completion")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  cmd->add_option("--temperature", a->temperature, "Sampling temperature (0: greedy)")
      ->capture_default_str();
  cmd->add_option("--top-k", a->top_k, "Sample among the k most likely tokens (0: all)")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 30));
  cmd->add_option("--repeats", a->repeats, "Timed repeats; the best and the median are reported")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1}, int64_t{1000}));
  cmd->add_option("--warmup", a->warmup, "Untimed repeats first (allocation, page faults)")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{0}, int64_t{1000}));
  cmd->add_option("--seed", a->seed, "The prompts and the samples, as `nanogpt rl --seed`")
      ->capture_default_str();
  cmd->add_flag("--batch-one", a->batch_one,
                "One sequence at a time (each prompt's samples one after the other, each with "
                "its own prefill): the batch-1 figure");
  cmd->add_option("--precision", a->precision,
                  "Products in fp32 or bf16 (default: what the checkpoint's configuration "
                  "resolves to on this CPU)")
      ->check(CLI::IsMember({"fp32", "bf16", "auto"}));
  add_checkpoint_window_option(cmd, a->window);
  cmd->add_option("--profile", a->profile,
                  "Profile the timed repeats: write a Chrome trace to this file and print where "
                  "the time went to stderr");
  cmd->add_option("--dump-prompts", a->dump_prompts,
                  "Write the prompts' ids here (JSON; without the <|endoftext|> every sequence "
                  "starts with)");
  cmd->add_option("--dump-completions", a->dump_completions,
                  "Write the last repeat's completions here (JSON, per prompt per sample; a "
                  "drawn <|endoftext|> included)");
  cmd->callback([a] { run_rollout_bench(*a); });
}

}  // namespace nanogpt::cli
