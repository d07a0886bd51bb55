#include "posttrain/rl.hpp"

#include <unistd.h>

#include <array>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <optional>
#include <span>

#include "data/chat_format.hpp"
#include "data/utf8.hpp"
#include "eval/fortune_rubric.hpp"
#include "eval/model_scorer.hpp"
#include "eval/rubric.hpp"
#include "eval/rubric_rates.hpp"
#include "eval/rubric_score.hpp"
#include "eval/task_registry.hpp"
#include "model/model_io.hpp"
#include "optim/gpt_optimizer.hpp"
#include "posttrain/checkpoint_judge.hpp"
#include "posttrain/finetune_optimizer.hpp"
#include "posttrain/loss_checks.hpp"
#include "posttrain/posttrain_checkpoint.hpp"
#include "posttrain/rollouts.hpp"
#include "posttrain/run_curves.hpp"
#include "posttrain/sequence_batch.hpp"
#include "posttrain/stage_ranks.hpp"
#include "posttrain/task_conversations.hpp"
#include "posttrain/value_head.hpp"
#include "posttrain/value_loss.hpp"
#include "runtime/build_info.hpp"
#include "runtime/cpu_info.hpp"
#include "runtime/error.hpp"
#include "runtime/file_io.hpp"
#include "runtime/stopwatch.hpp"
#include "train/attention_window.hpp"
#include "train/run_directory.hpp"
#include "train/stop_signals.hpp"

namespace nanogpt {

namespace {

void check_options(const RlOptions& o) {
  if (!o.judge.empty() && o.rubric.empty()) {
    throw InputError("rl: --judge answers a rubric's judge criteria; give it with --rubric FILE");
  }
  if (o.tasks.empty() == o.rubric.empty()) {
    throw InputError(
        "rl: give the prompts and rewards with --tasks MIXTURE (verifiers) or "
        "--rubric FILE (weighted criteria), one of the two");
  }
  if (o.steps < 1) throw InputError("rl: --steps must be >= 1");
  if (o.prompts_per_step < 1) throw InputError("rl: --prompts must be >= 1");
  if (o.group_size < 1) throw InputError("rl: --group must be >= 1");
  if (o.group_size < 2 && o.estimator != AdvantageEstimator::kReinforceEma &&
      o.estimator != AdvantageEstimator::kPpoGae) {
    throw InputError("rl: --group 1 leaves every group's rewards equal (no gradient) under " +
                     std::string(advantage_estimator_name(o.estimator)) +
                     ": sample 2 or more per prompt, or use --estimator reinforce_ema or ppo_gae");
  }
  if (o.max_tokens < 1) throw InputError("rl: --max-tokens must be >= 1");
  if (!(o.temperature > 0) || !std::isfinite(o.temperature)) {
    throw InputError(
        "rl: --temperature must be > 0: the policy's log-probabilities are those of "
        "the tempered distribution it samples from");
  }
  if (o.top_k != 0) {
    throw InputError(
        "rl: --top-k is not supported: the update's log-probabilities are those of "
        "the whole tempered distribution, so sampling must draw from all of it");
  }
  if (o.updates_per_batch < 1) throw InputError("rl: --updates must be >= 1");
  if (o.updates_per_batch > 1 && o.loss.objective == PolicyObjective::kReinforce) {
    throw InputError(
        "rl: --updates > 1 reuses a batch off-policy, which needs the clipped "
        "ratio: use --objective clipped");
  }
  // PPO's options are checked whatever the estimator: a value out of range is a mistake either
  // way.
  if (!(o.gae.gamma >= 0 && o.gae.gamma <= 1)) {
    throw InputError("rl: --gamma " + posttrain_checks::show(o.gae.gamma) +
                     " is out of range; the discount must be in [0, 1] (1: none, the default)");
  }
  if (!(o.gae.lambda >= 0 && o.gae.lambda <= 1)) {
    throw InputError("rl: --lam " + posttrain_checks::show(o.gae.lambda) +
                     " is out of range; GAE's λ must be in [0, 1] (0.95 by default)");
  }
  if (!(o.value_coef >= 0) || !std::isfinite(o.value_coef)) {
    throw InputError("rl: --value-coef " + posttrain_checks::show(o.value_coef) +
                     " is out of range; it must be >= 0 (0: the trunk gets no value gradient)");
  }
  if (!(o.value_lr > 0) || !std::isfinite(o.value_lr)) {
    throw InputError("rl: --value-lr " + posttrain_checks::show(o.value_lr) +
                     " is out of range; the value head's learning rate must be > 0 (1e-3 by "
                     "default)");
  }
  if (!(o.value_clip >= 0) || !std::isfinite(o.value_clip)) {
    throw InputError("rl: --value-clip " + posttrain_checks::show(o.value_clip) +
                     " is out of range; it must be >= 0 (0: the value loss is not clipped)");
  }
  check_policy_loss_config(o.loss);
  if (o.evaluate) check_chat_eval_options(o.eval);
  if (!(o.ema_decay >= 0 && o.ema_decay < 1)) {
    throw InputError("rl: --ema-decay must be in [0, 1)");
  }
}

// Completion k of a step: its problem, the prompt's ids (without the begin token) and what was
// sampled, up to and including <|assistant_end|> (or the <|endoftext|> the model drew).
struct Completion {
  size_t problem = 0;
  std::vector<uint32_t> tokens;
  double reward = 0;
  bool ended = false;
};

// 1 − Var(R − V)/Var(R) over the counted tokens: 1 when V predicts the returns exactly, 0 when it
// does no better than their mean, NaN when the returns all agree (nothing to explain).
// 1 − Var(R − V)/Var(R) over the counted tokens of every part of the batch (sum_parts as
// whiten_advantages takes it); NaN when the returns all agree or nothing is counted.
double explained_variance(const SequenceLayout& layout, std::span<const double> returns,
                          std::span<const double> values, const PartSums& sum_parts) {
  std::array<double, 3> sums = {0, 0, 0};  // n, Σ R, Σ (R − V)
  for (size_t t = 0; t < returns.size(); ++t) {
    if (layout.mask[t] == 0) continue;
    sums[0] += 1;
    sums[1] += returns[t];
    sums[2] += returns[t] - values[t];
  }
  sum_parts(sums);
  const double n = sums[0];
  if (n == 0) return std::nan("");
  std::array<double, 2> vars = {0, 0};  // Σ (R − mean)², Σ (e − mean)²
  for (size_t t = 0; t < returns.size(); ++t) {
    if (layout.mask[t] == 0) continue;
    const double r = returns[t] - sums[1] / n, e = returns[t] - values[t] - sums[2] / n;
    vars[0] += r * r;
    vars[1] += e * e;
  }
  sum_parts(vars);
  return vars[0] > 0 ? 1.0 - vars[1] / vars[0] : std::nan("");
}

}  // namespace

RlResult run_rl(const RlOptions& o) {
  check_options(o);
  const PosttrainStart start = resolve_posttrain_start("rl", o.checkpoint, o.run_dir, o.resume,
                                                       o.tokenizer, o.window_blocks);
  const BpeTokenizer& tokenizer = start.tokenizer;
  const ChatTokens& chat = start.chat;
  const std::string& start_checkpoint = start.checkpoint;
  const Config& c = start.config;
  const int64_t window = start.window_blocks;
  const std::vector<TaskCell> cells =
      o.tasks.empty() ? std::vector<TaskCell>{} : parse_task_mixture(o.tasks);
  std::optional<Rubric> rubric;
  if (!o.rubric.empty()) {
    rubric =
        o.rubric == "builtin:fortune-answers" ? builtin_fortune_rubric() : load_rubric(o.rubric);
    if (rubric_uses_judge(*rubric) && o.judge.empty()) {
      throw InputError("rl: rubric '" + o.rubric +
                       "' has judge criteria and no judge: pass --judge CHECKPOINT (a checkpoint "
                       "or run directory whose model answers them)");
    }
    if (rubric->prompts.empty()) throw InputError("rl: rubric '" + o.rubric + "' has no prompts");
  }
  // Loaded before anything is written, so a bad judge leaves no run behind.
  std::unique_ptr<CheckpointJudge> judge;
  if (!o.judge.empty()) judge = std::make_unique<CheckpointJudge>(o.judge, o.judge_tokenizer, 0);
  RubricJudge* const rubric_judge = judge ? &judge->judge() : nullptr;
  const int64_t seq_len = c.train_seq_len;
  const int64_t total_updates = o.steps * o.updates_per_batch;

  Comm& comm = stage_comm(o.comm);
  const bool root = comm.is_root();
  if (o.prompts_per_step < comm.size()) {
    throw InputError("rl: --prompts " + std::to_string(o.prompts_per_step) + " is fewer than the " +
                     std::to_string(comm.size()) +
                     " ranks: each rank samples whole groups of at least one prompt; raise "
                     "--prompts or run on fewer ranks");
  }
  const nlohmann::ordered_json fields{
      {"tasks", cells.empty() ? nlohmann::ordered_json(nullptr)
                              : nlohmann::ordered_json(task_mixture_string(cells))},
      {"rubric",
       o.rubric.empty() ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(o.rubric)},
      {"judge",
       judge ? nlohmann::ordered_json(judge->checkpoint()) : nlohmann::ordered_json(nullptr)},
      {"steps", o.steps},
      {"prompts_per_step", o.prompts_per_step},
      {"group_size", o.group_size},
      {"max_tokens", o.max_tokens},
      {"temperature", o.temperature},
      {"top_k", o.top_k},
      {"estimator", advantage_estimator_name(o.estimator)},
      {"objective", policy_objective_name(o.loss.objective)},
      {"clip_low", o.loss.clip_low},
      {"clip_high", o.loss.clip_high},
      {"kl_coef", o.loss.kl_coef},
      {"aggregation", loss_aggregation_name(o.loss.aggregation.mode)},
      {"gamma", o.gae.gamma},
      {"lambda", o.gae.lambda},
      {"value_coef", o.value_coef},
      {"value_lr", o.value_lr},
      {"value_clip", o.value_clip},
      {"whiten_advantages", o.whiten_advantages},
      {"updates_per_batch", o.updates_per_batch},
      {"lr_scale", o.lr_scale},
      {"seed", o.seed}};
  check_stage_ranks_agree(comm, "rl", fields.dump() + o.run_dir + (o.resume ? " resume" : ""),
                          start_checkpoint);

  Gpt model(c);
  load_model_weights(model, start_checkpoint);
  const Config oc = finetune_optimizer_config(c, o.lr_scale, 1.0, total_updates);
  GptOptimizer optimizer(model.params(), oc, model.precision(), comm,
                         model.gradient_ready_stages());
  PosttrainState state;
  state.stage = "rl";
  state.seed = o.seed;
  std::string reference_checkpoint = start_checkpoint;
  if (o.resume) {
    state = load_posttrain_state(start_checkpoint, "rl", optimizer);
    reference_checkpoint = state.extra.value("reference", start_checkpoint);
  } else {
    import_pretraining_optimizer_state(start_checkpoint, optimizer);
    state.extra["reference"] = std::filesystem::absolute(start_checkpoint).string();
  }
  EmaBaseline ema{o.ema_decay, state.extra.value("ema_baseline", 0.0)};
  // PPO's value head: the one of the checkpoint it starts from (its own on --resume, or an earlier
  // PPO run's), else a new one at zero.
  const bool ppo = o.estimator == AdvantageEstimator::kPpoGae;
  std::optional<ValueHead> value_head;
  if (ppo) {
    const std::string path = start_checkpoint + "/" + ValueHead::kFileName;
    value_head =
        std::filesystem::exists(path) ? ValueHead::load(path, c.model_dim) : ValueHead(c.model_dim);
  }
  // The reference policy for the KL penalty: the starting checkpoint, frozen.
  std::unique_ptr<Gpt> reference;
  if (o.loss.kl_coef > 0) {
    reference = std::make_unique<Gpt>(c);
    load_model_weights(*reference, reference_checkpoint);
  }

  // Rank 0 alone writes the run directory.
  const std::optional<RunDirectory> run_directory =
      open_stage_run_directory(comm, "rl", o.run_dir, o.resume, state.step, fields, start,
                               o.tokenizer_record, o.command_line);
  const RunDirectory* run = run_directory ? &*run_directory : nullptr;

  ModelScorer scorer(model, window);
  RlResult result;
  // A rubric's prompts as the chat prompts the scorer continues.
  auto rubric_prompt = [&](const RubricItem& item) {
    std::vector<uint32_t> ids =
        render_prompt(Conversation{{ChatMessage{ChatRole::kUser, item.prompt}}}, tokenizer, chat,
                      seq_len + 1 - o.max_tokens, "rubric prompt '" + item.name + "'");
    ids.erase(ids.begin());  // the scorer starts every sequence with <|endoftext|>
    return ids;
  };
  std::optional<RubricRates> rubric_before;
  auto evaluate_now = [&](int64_t step) {
    if (rubric) {
      // Every prompt of the rubric, eval.samples samples each at the training temperature.
      std::vector<std::vector<uint32_t>> prompts;
      for (const RubricItem& item : rubric->prompts) prompts.push_back(rubric_prompt(item));
      RolloutSampling rs;
      rs.group_size = std::max<int64_t>(1, o.eval.samples);
      rs.max_tokens = o.max_tokens;
      rs.sampling.temperature = o.temperature;
      rs.sampling.top_k = o.top_k;
      rs.seed = o.eval.seed ^ 0xE7A1ull;
      rs.assistant_end = chat.assistant_end;
      const auto samples = sample_completions(scorer, prompts, rs);
      std::vector<std::string> texts;
      std::vector<RubricResponse> responses;
      for (size_t i = 0; i < prompts.size(); ++i) {
        for (const GeneratedSample& g : samples[i]) {
          std::vector<uint32_t> ids = g.tokens;
          if (!ids.empty() && ids.back() == chat.assistant_end) ids.pop_back();
          texts.push_back(valid_utf8(tokenizer.decode(ids)));
          responses.push_back({&rubric->prompts[i], {}});
        }
      }
      for (size_t r = 0; r < texts.size(); ++r) responses[r].response = texts[r];
      const RubricRates rates = rubric_rates(score_responses(*rubric, responses, rubric_judge));
      nlohmann::ordered_json criteria = nlohmann::ordered_json::object();
      for (const CriterionRate& cr : rates.criteria) criteria[cr.criterion] = cr.rate();
      result.evaluated = true;
      if (run != nullptr) {
        run->append_metrics(
            {{"step", step}, {"eval", {{"reward", rates.mean_reward}, {"criteria", criteria}}}});
        std::fprintf(stderr, "rl: step %lld: rubric reward %.3f over %lld responses\n",
                     static_cast<long long>(step), rates.mean_reward,
                     static_cast<long long>(rates.responses));
      }
      if (!rubric_before) {
        rubric_before = rates;
      } else {
        result.rubric_table = rubric_rates_table(rates, &*rubric_before);
      }
      return ChatEvalResult{};
    }
    result.evaluated = true;
    return evaluate_and_record(scorer, tokenizer, chat, cells, o.eval, seq_len, run, "rl", step);
  };
  if (o.evaluate && !o.resume) result.before = evaluate_now(0);

  const StopSignalScope signals(Comm::launched_by_mpi());
  const auto P = static_cast<size_t>(o.prompts_per_step);
  RolloutSampling rollout;
  rollout.group_size = o.group_size;
  rollout.max_tokens = o.max_tokens;
  rollout.sampling.temperature = o.temperature;
  rollout.sampling.top_k = o.top_k;
  rollout.seed = o.seed;
  rollout.assistant_end = chat.assistant_end;
  const uint32_t end = chat.assistant_end;
  int64_t step = state.step;
  auto save = [&](int64_t at_step, double loss) {
    state.step = at_step;
    state.extra["ema_baseline"] = ema.value;
    std::map<std::string, std::string> files;
    if (value_head) files[ValueHead::kFileName] = value_head->serialize();
    result.last_checkpoint = save_posttrain_state(o.run_dir, state, model, optimizer, loss,
                                                  o.tokenizer_record, std::move(files));
  };
  while (step < o.steps) {
    // The ranks stop after the same step: a signal may reach them at different moments.
    if (comm.max(stop_requested() ? 1 : 0, "stop request") != 0 ||
        (o.max_steps > 0 && result.steps_run == o.max_steps)) {
      result.interrupted = true;
      break;
    }
    RlStepMetrics m;
    m.step = step + 1;
    // 1. Prompts: the mixture's train problems s·P .. s·P + P - 1, cells interleaved, or the
    // rubric's prompts in turn.
    std::vector<TaskInstance> problems;
    std::vector<const RubricItem*> items;
    std::vector<std::vector<uint32_t>> prompts;
    if (rubric) {
      for (size_t i = 0; i < P; ++i) {
        const size_t at = (static_cast<size_t>(step) * P + i) % rubric->prompts.size();
        items.push_back(&rubric->prompts[at]);
        prompts.push_back(rubric_prompt(*items.back()));
      }
    } else {
      problems = rollout_problems(cells, o.seed, step, o.prompts_per_step);
      for (const TaskInstance& problem : problems) {
        prompts.push_back(rollout_prompt(problem, tokenizer, chat, seq_len, o.max_tokens));
      }
    }
    // 2. Sampling: this rank's prompts (whole groups), every group in one batched decode.
    const SliceRange mine = even_slice(o.prompts_per_step, comm.size(), comm.rank());
    const auto first_prompt = static_cast<size_t>(mine.begin);
    Stopwatch t0;
    rollout.step = step;
    rollout.first_prompt = first_prompt;
    const std::vector<std::vector<GeneratedSample>> samples =
        sample_completions(scorer,
                           std::span<const std::vector<uint32_t>>(prompts).subspan(
                               first_prompt, static_cast<size_t>(mine.size())),
                           rollout);
    m.sample_s = t0.seconds();
    // 3. Scoring: a rubric's judge questions of the whole step go to the judge in one batch.
    t0.restart();
    std::vector<Completion> completions;
    std::vector<std::string> texts;
    for (size_t i = 0; i < samples.size(); ++i) {
      for (const GeneratedSample& s : samples[i]) {
        Completion k;
        k.problem = first_prompt + i;
        k.tokens = s.tokens;
        k.ended = !k.tokens.empty() && k.tokens.back() == end;
        std::vector<uint32_t> text_ids = k.tokens;
        if (k.ended) text_ids.pop_back();
        // The model's <|endoftext|> was sampled too: it is part of what the update sees.
        if (s.hit_eot) k.tokens.push_back(static_cast<uint32_t>(c.eot_id));
        // A sample may stop inside a character: checks and the judge read U+FFFD there.
        texts.push_back(valid_utf8(tokenizer.decode(text_ids)));
        completions.push_back(std::move(k));
      }
    }
    if (rubric) {
      std::vector<RubricResponse> responses;
      for (size_t k = 0; k < completions.size(); ++k) {
        responses.push_back({items[completions[k].problem], texts[k]});
      }
      const std::vector<RubricScore> scores = score_responses(*rubric, responses, rubric_judge);
      for (size_t k = 0; k < completions.size(); ++k) completions[k].reward = scores[k].reward;
    } else {
      for (size_t k = 0; k < completions.size(); ++k) {
        completions[k].reward = verify(problems[completions[k].problem], texts[k]).value;
      }
    }
    std::vector<double> rewards;
    double step_tokens = 0;
    for (const Completion& k : completions) {
      rewards.push_back(k.reward);
      step_tokens += static_cast<double>(k.tokens.size());
      m.mean_reward += k.reward;
      m.pass_rate += k.reward >= 1.0 ? 1.0 : 0.0;
      m.mean_length += static_cast<double>(k.tokens.size());
    }
    // The step's metrics and group counts over every rank's completions.
    std::array<double, 5> totals = {m.mean_reward, m.pass_rate, m.mean_length, step_tokens, 0.0};
    std::vector<double> advantages;
    if (ppo) {
      // Per token, once the first update's forward has the values (below); the groups whose
      // rewards all agree are counted all the same (the value head still gives them a gradient).
      int64_t uniform_groups = 0;
      for (size_t g = 0; g + static_cast<size_t>(o.group_size) <= rewards.size();
           g += static_cast<size_t>(o.group_size)) {
        bool uniform = o.group_size > 1;
        for (int64_t i = 1; i < o.group_size; ++i) {
          uniform = uniform && rewards[g + static_cast<size_t>(i)] == rewards[g];
        }
        uniform_groups += uniform ? 1 : 0;
      }
      totals[4] = static_cast<double>(uniform_groups);
    } else if (o.estimator == AdvantageEstimator::kReinforceEma) {
      // One baseline for the whole step: every rank moves it by the same batch mean.
      const int64_t first_completion = mine.begin * o.group_size;
      const std::vector<double> all_rewards = gather_by_rank(
          comm, rewards, first_completion, o.prompts_per_step * o.group_size, "rewards");
      const std::vector<double> all = ema_advantages(all_rewards, ema);
      advantages.assign(all.begin() + first_completion,
                        all.begin() + first_completion + static_cast<int64_t>(rewards.size()));
    } else {
      GroupAdvantages ga = o.estimator == AdvantageEstimator::kGrpo
                               ? grpo_advantages(rewards, o.group_size)
                               : group_mean_advantages(rewards, o.group_size);
      advantages = std::move(ga.advantages);
      totals[4] = static_cast<double>(ga.uniform_groups);
    }
    comm.sum_in_place(totals, "rl step metrics");
    const auto n_completions = static_cast<double>(o.prompts_per_step * o.group_size);
    m.mean_reward = totals[0] / n_completions;
    m.pass_rate = totals[1] / n_completions;
    m.mean_length = totals[2] / n_completions;
    m.rollout_tokens_per_s = totals[3] / m.sample_s;  // every rank's tokens, rank 0's seconds
    m.uniform_groups = static_cast<int64_t>(totals[4]);
    m.uniform_fraction = static_cast<double>(m.uniform_groups) / static_cast<double>(P);
    m.score_s = t0.seconds();

    // 4. Training: each completion after its prompt, its sampled tokens marked.
    t0.restart();
    std::vector<std::vector<uint32_t>> seq_ids(completions.size());
    std::vector<std::vector<uint8_t>> seq_marks(completions.size());
    for (size_t k = 0; k < completions.size(); ++k) {
      const Completion& cp = completions[k];
      seq_ids[k].push_back(chat.bos);
      seq_ids[k].insert(seq_ids[k].end(), prompts[cp.problem].begin(), prompts[cp.problem].end());
      seq_marks[k].assign(seq_ids[k].size(), 0);
      seq_ids[k].insert(seq_ids[k].end(), cp.tokens.begin(), cp.tokens.end());
      seq_marks[k].resize(seq_ids[k].size(), 1);
    }
    SequenceBatch batch(std::move(seq_ids), std::move(seq_marks), seq_len,
                        static_cast<int32_t>(chat.bos));
    const std::vector<uint8_t> counted(static_cast<size_t>(batch.marked_tokens()), 1);
    const SequenceLayout layout{batch.offsets(), counted};
    std::vector<double> token_advantages;
    if (!ppo) token_advantages = advantages_per_token(layout, advantages);
    // PPO's per-token rewards: the completion's on its last token.
    std::vector<double> token_rewards(counted.size(), 0.0);
    for (size_t k = 0; k < completions.size(); ++k) {
      if (batch.offsets()[k + 1] > batch.offsets()[k]) {
        token_rewards[static_cast<size_t>(batch.offsets()[k + 1] - 1)] = completions[k].reward;
      }
    }
    // The whole step's sequences and tokens, every rank's: the losses' divisors.
    LossNormalizers whole = count_normalizers(layout);
    {
      std::array<double, 2> counts = {static_cast<double>(whole.sequences),
                                      static_cast<double>(whole.tokens)};
      comm.sum_in_place(counts, "rl loss normalizers");
      whole = {static_cast<int64_t>(counts[0]), static_cast<int64_t>(counts[1])};
    }
    const auto temperature = static_cast<float>(o.temperature);
    std::vector<double> logp_ref;
    if (reference) logp_ref = batch.logprobs(*reference, window, temperature);
    std::vector<double> logp_old, entropy, values, values_old, returns;
    for (int64_t u = 0; u < o.updates_per_batch; ++u) {
      std::vector<double>* token_entropy = u == 0 ? &entropy : nullptr;
      const std::vector<double> logp =
          ppo ? batch.logprobs(model, window, temperature, token_entropy, *value_head, values)
              : batch.logprobs(model, window, temperature, token_entropy);
      if (u == 0) logp_old = logp;
      if (ppo && u == 0) {
        values_old = values;
        GaeResult gae = gae_advantages(layout, token_rewards, values_old, o.gae);
        token_advantages = std::move(gae.advantages);
        returns = std::move(gae.returns);
        const PartSums over_ranks = [&](std::span<double> v) {
          comm.sum_in_place(v, "advantage and value statistics");
        };
        if (o.whiten_advantages) whiten_advantages(layout, token_advantages, over_ranks);
        m.explained_variance = explained_variance(layout, returns, values_old, over_ranks);
      }
      PolicyTokens tokens;
      tokens.layout = layout;
      tokens.logp = logp;
      tokens.logp_old = logp_old;
      tokens.logp_ref = logp_ref;
      tokens.advantages = token_advantages;
      PolicyLossConfig lc = o.loss;
      if (lc.aggregation.mode == LossAggregation::kConstant && lc.aggregation.max_length == 0) {
        lc.aggregation.max_length = o.max_tokens + 1;  // + the <|endoftext|> a sample may end with
      }
      // This rank's part of the step's loss: normalised by the whole step's counts.
      const PolicyLossResult pl = policy_loss(tokens, lc, whole);
      model.zero_grads();
      if (ppo) {
        ValueTokens vt;
        vt.layout = layout;
        vt.values = values;
        vt.old_values = values_old;
        vt.returns = returns;
        const ValueLossResult vl =
            value_loss(vt, ValueLossConfig{o.value_clip, lc.aggregation}, whole);
        value_head->zero_grads();
        batch.backward(model, window, temperature, pl.grad_logp, *value_head, vl.grad_values,
                       o.value_coef);
        // The head's gradient summed over the ranks, as the model's below.
        comm.sum_in_place(value_head->grads(), "value head gradient");
        std::array<double, 3> vs = {vl.loss, vl.clip_fraction * static_cast<double>(vl.tokens),
                                    static_cast<double>(vl.tokens)};
        comm.sum_in_place(vs, "value loss");
        if (u == 0) m.value_loss = vs[0];
        if (vs[2] > 0) {
          m.value_clip_fraction += vs[1] / vs[2] / static_cast<double>(o.updates_per_batch);
        }
      } else {
        batch.backward(model, window, temperature, pl.grad_logp);
      }
      sum_gradients(comm, model.grads());
      optimizer.step(model.params(), model.grads(), step * o.updates_per_batch + u);
      if (ppo) value_head->adam_step(o.value_lr);
      if (u == 0) {
        const auto n = static_cast<double>(pl.tokens);
        std::array<double, 6> sums = {
            pl.loss, pl.clip_fraction * n, pl.mean_kl * n, pl.mean_ratio * n, n, 0.0};
        for (double e : entropy) sums[5] += e;
        comm.sum_in_place(sums, "rl loss metrics");
        m.loss = sums[0];
        m.clip_fraction = sums[1] / sums[4];
        m.mean_kl = sums[2] / sums[4];
        m.mean_ratio = sums[3] / sums[4];
        m.entropy = sums[5] / static_cast<double>(whole.tokens);
      }
    }
    m.train_s = t0.seconds();
    ++step;
    ++result.steps_run;
    result.steps.push_back(m);
    nlohmann::ordered_json line = {{"step", step},
                                   {"reward", m.mean_reward},
                                   {"pass_rate", m.pass_rate},
                                   {"length", m.mean_length},
                                   {"uniform_groups", m.uniform_groups},
                                   {"uniform_fraction", m.uniform_fraction},
                                   {"loss", m.loss},
                                   {"clip_fraction", m.clip_fraction},
                                   {"kl", m.mean_kl},
                                   {"ratio", m.mean_ratio},
                                   {"entropy", m.entropy}};
    std::string value_text;
    if (ppo) {
      // NaN (returns that all agree) is written as null.
      line["value_loss"] = m.value_loss;
      line["value_clip_fraction"] = m.value_clip_fraction;
      line["explained_variance"] = m.explained_variance;
      char buf[96];
      std::snprintf(buf, sizeof buf, " value loss %.4f explained var %.3f", m.value_loss,
                    m.explained_variance);
      value_text = buf;
    }
    line["sample_s"] = m.sample_s;
    line["score_s"] = m.score_s;
    line["train_s"] = m.train_s;
    line["step_s"] = m.sample_s + m.score_s + m.train_s;
    line["rollout_tokens_per_s"] = m.rollout_tokens_per_s;
    if (run != nullptr) {
      run->append_metrics(line);
      std::fprintf(stderr,
                   "rl: step %lld/%lld reward %.3f pass %.2f length %.1f uniform groups %lld/%zu "
                   "kl %.4f entropy %.3f%s | sample %.2fs (%.0f tok/s) score %.3fs train %.2fs\n",
                   static_cast<long long>(step), static_cast<long long>(o.steps), m.mean_reward,
                   m.pass_rate, m.mean_length, static_cast<long long>(m.uniform_groups), P,
                   m.mean_kl, m.entropy, value_text.c_str(), m.sample_s, m.rollout_tokens_per_s,
                   m.score_s, m.train_s);
    }
    const bool at_end = step == o.steps;
    if (o.evaluate && (at_end || (o.eval_every > 0 && step % o.eval_every == 0))) {
      result.after = evaluate_now(step);
    }
    if (!at_end && o.checkpoint_every > 0 && step % o.checkpoint_every == 0) save(step, m.loss);
  }
  if (result.steps_run > 0) {
    save(step, result.steps.back().loss);
  } else {
    result.last_checkpoint = start_checkpoint;
  }
  if (root && !result.rubric_table.empty()) {
    std::fprintf(stderr, "rl: the rubric's criteria before and after\n%s",
                 result.rubric_table.c_str());
    write_file_atomic(o.run_dir + "/rubric_rates.txt", result.rubric_table);
  }
  std::vector<CurvePanel> panels = {{"mean reward", "/reward"},
                                    rubric
                                        ? CurvePanel{"rubric reward, every prompt", "/eval/reward"}
                                        : CurvePanel{"held-out pass@1", "/eval/pass@1"},
                                    {"completion tokens", "/length"}};
  if (ppo) {
    panels.push_back({"value loss", "/value_loss"});
    panels.push_back({"explained variance", "/explained_variance"});
  } else {
    panels.push_back({"zero-variance groups", "/uniform_fraction"});
  }
  if (root) write_run_curves(o.run_dir, panels, "nanogpt rl: " + o.run_dir);
  return result;
}

}  // namespace nanogpt
