#include "posttrain/dpo.hpp"

#include <array>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <numeric>
#include <optional>

#include "data/chat_format.hpp"
#include "model/model_io.hpp"
#include "optim/gpt_optimizer.hpp"
#include "posttrain/finetune_optimizer.hpp"
#include "posttrain/posttrain_checkpoint.hpp"
#include "posttrain/preference_pairs.hpp"
#include "posttrain/run_curves.hpp"
#include "posttrain/sequence_batch.hpp"
#include "posttrain/stage_ranks.hpp"
#include "posttrain/task_conversations.hpp"
#include "runtime/build_info.hpp"
#include "runtime/cpu_info.hpp"
#include "runtime/error.hpp"
#include "runtime/file_io.hpp"
#include "runtime/random.hpp"
#include "train/attention_window.hpp"
#include "train/run_directory.hpp"
#include "train/stop_signals.hpp"

namespace nanogpt {

namespace {

// A pair as two rendered sequences with the reply's tokens marked.
struct RenderedPair {
  RenderedConversation chosen, rejected;
};

// Sequence log-probabilities of the marked tokens of `seqs` (sums per sequence), in batches.
std::vector<double> sequence_logprobs(Gpt& model, int64_t window, int64_t seq_len, int32_t pad,
                                      const std::vector<const RenderedConversation*>& seqs) {
  std::vector<double> out;
  constexpr size_t kBatch = 256;
  for (size_t s0 = 0; s0 < seqs.size(); s0 += kBatch) {
    std::vector<std::vector<uint32_t>> ids;
    std::vector<std::vector<uint8_t>> marks;
    for (size_t s = s0; s < std::min(seqs.size(), s0 + kBatch); ++s) {
      ids.push_back(seqs[s]->ids);
      marks.push_back(seqs[s]->loss_mask);
    }
    SequenceBatch batch(std::move(ids), std::move(marks), seq_len, pad);
    const std::vector<double> lp = batch.logprobs(model, window, 1.0f);
    for (int64_t k = 0; k < batch.sequences(); ++k) {
      double sum = 0;
      for (int64_t j = batch.offsets()[static_cast<size_t>(k)];
           j < batch.offsets()[static_cast<size_t>(k) + 1]; ++j) {
        sum += lp[static_cast<size_t>(j)];
      }
      out.push_back(sum);
    }
  }
  return out;
}

}  // namespace

DpoRunResult run_dpo(const DpoOptions& o) {
  if (o.pairs.empty() == o.tasks.empty()) {
    throw InputError(
        "dpo: give the pairs with --pairs FILE.jsonl, or --tasks MIXTURE to build "
        "them on-policy (one)");
  }
  if (o.epochs < 1) throw InputError("dpo: --epochs must be >= 1");
  if (o.pairs_per_step < 1) throw InputError("dpo: --pairs-per-step must be >= 1");
  if (!o.eval_tasks.empty()) check_chat_eval_options(o.eval);
  if (!(o.loss.beta > 0) || !std::isfinite(o.loss.beta)) {
    throw InputError("dpo: --beta must be > 0 (TRL's default 0.1)");
  }
  const PosttrainStart start = resolve_posttrain_start("dpo", o.checkpoint, o.run_dir, o.resume,
                                                       o.tokenizer, o.window_blocks);
  const BpeTokenizer& tokenizer = start.tokenizer;
  const ChatTokens& chat = start.chat;
  const std::string& start_checkpoint = start.checkpoint;
  const Config& c = start.config;
  const int64_t window = start.window_blocks;
  const int64_t seq_len = c.train_seq_len;
  Comm& comm = stage_comm(o.comm);
  const bool root = comm.is_root();
  std::vector<TaskCell> eval_cells;
  if (!o.eval_tasks.empty()) eval_cells = parse_task_mixture(o.eval_tasks);

  // On-policy pairs come from the starting checkpoint, sampled before anything is written; a
  // resume reads the run's own copy.
  std::vector<PreferencePair> pairs;
  std::string pairs_source = o.pairs;
  std::optional<PolicyPairs> sampled;
  if (!o.pairs.empty()) {
    pairs = read_preference_pairs(o.pairs);
  } else if (o.resume) {
    pairs_source = o.run_dir + "/pairs.jsonl";
    pairs = read_preference_pairs(pairs_source);
  } else {
    const std::vector<TaskCell> cells = parse_task_mixture(o.tasks);
    Gpt sampler(c);
    load_model_weights(sampler, start_checkpoint);
    ModelScorer scorer(sampler, window);
    PolicyPairOptions po = o.policy_pairs;
    po.seq_len = seq_len;
    sampled = sample_policy_pairs(scorer, tokenizer, chat, cells, po);
    pairs = sampled->pairs;
    if (root) {
      std::fprintf(stderr,
                   "dpo: %zu on-policy pairs from %lld problems (%lld with every completion scored "
                   "alike), mean reward %.3f\n",
                   pairs.size(), static_cast<long long>(sampled->problems),
                   static_cast<long long>(sampled->uniform_problems), sampled->mean_reward);
    }
    if (pairs.empty()) {
      throw InputError(
          "dpo: every problem's completions scored alike, so no pair could be built; "
          "sample more (--pair-problems, --pair-group) or a higher temperature");
    }
    pairs_source = o.run_dir + "/pairs.jsonl";
  }
  std::vector<RenderedPair> rendered;
  for (size_t i = 0; i < pairs.size(); ++i) {
    const std::string where = pairs_source + ": pair " + std::to_string(i + 1);
    rendered.push_back({render_conversation(with_reply(pairs[i].prompt, pairs[i].chosen), tokenizer,
                                            chat, seq_len + 1, where + " (chosen)"),
                        render_conversation(with_reply(pairs[i].prompt, pairs[i].rejected),
                                            tokenizer, chat, seq_len + 1, where + " (rejected)")});
  }
  const auto n_pairs = static_cast<int64_t>(pairs.size());
  const int64_t steps_per_epoch = (n_pairs + o.pairs_per_step - 1) / o.pairs_per_step;
  const int64_t total_steps = steps_per_epoch * o.epochs;

  Gpt model(c);
  PosttrainState state;
  state.stage = "dpo";
  state.seed = o.seed;
  std::string reference_checkpoint = start_checkpoint;
  const nlohmann::ordered_json fields{
      {"pairs_file", pairs_source},
      {"tasks",
       o.tasks.empty() ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(o.tasks)},
      {"on_policy", sampled
                        ? nlohmann::ordered_json{{"problems", sampled->problems},
                                                 {"uniform_problems", sampled->uniform_problems},
                                                 {"mean_reward", sampled->mean_reward},
                                                 {"group", o.policy_pairs.group_size},
                                                 {"temperature", o.policy_pairs.temperature}}
                        : nlohmann::ordered_json(nullptr)},
      {"pairs", n_pairs},
      {"loss", dpo_loss_kind_name(o.loss.kind)},
      {"beta", o.loss.beta},
      {"epochs", o.epochs},
      {"pairs_per_step", o.pairs_per_step},
      {"steps", total_steps},
      {"lr_scale", o.lr_scale},
      {"cooldown_frac", o.cooldown_frac},
      {"seed", o.seed}};
  check_stage_ranks_agree(comm, "dpo", fields.dump() + o.run_dir + (o.resume ? " resume" : ""),
                          start_checkpoint);
  const Config oc = finetune_optimizer_config(c, o.lr_scale, o.cooldown_frac, total_steps);
  GptOptimizer optimizer(model.params(), oc, model.precision(), comm,
                         model.gradient_ready_stages());
  if (o.resume) {
    state = load_posttrain_state(start_checkpoint, "dpo", optimizer);
    reference_checkpoint = state.extra.at("reference").get<std::string>();
  } else {
    import_pretraining_optimizer_state(start_checkpoint, optimizer);
    state.extra["reference"] = std::filesystem::absolute(start_checkpoint).string();
  }
  // The reference's sequence log-probabilities, once: the reference's weights are loaded into
  // the model, scored, then (on resume) the policy's replace them.
  load_model_weights(model, reference_checkpoint);
  const auto pad = static_cast<int32_t>(chat.bos);
  std::vector<const RenderedConversation*> all;
  for (const RenderedPair& p : rendered) {
    all.push_back(&p.chosen);
    all.push_back(&p.rejected);
  }
  // Each rank scores a slice of the sequences; every rank gets all of them.
  const SliceRange ref_mine =
      even_slice(static_cast<int64_t>(all.size()), comm.size(), comm.rank());
  const std::vector<const RenderedConversation*> ref_slice(all.begin() + ref_mine.begin,
                                                           all.begin() + ref_mine.end);
  const std::vector<double> reference =
      gather_by_rank(comm, sequence_logprobs(model, window, seq_len, pad, ref_slice),
                     ref_mine.begin, static_cast<int64_t>(all.size()), "reference log-probs");
  if (o.resume) load_model_weights(model, start_checkpoint);

  // On-policy pairs are kept with the run (a resume reads them there).
  if (root && !o.resume && sampled) {
    std::filesystem::create_directories(o.run_dir);
    write_preference_pairs(pairs_source, pairs);
  }
  // Rank 0 alone writes the run directory.
  const std::optional<RunDirectory> run_directory =
      open_stage_run_directory(comm, "dpo", o.run_dir, o.resume, state.step, fields, start,
                               o.tokenizer_record, o.command_line);
  const RunDirectory* run = run_directory ? &*run_directory : nullptr;

  DpoRunResult result;
  result.steps = total_steps;
  std::unique_ptr<ModelScorer> scorer;
  auto evaluate_now = [&](int64_t step) {
    if (!scorer) scorer = std::make_unique<ModelScorer>(model, window);
    result.evaluated = true;
    return evaluate_and_record(*scorer, tokenizer, chat, eval_cells, o.eval, seq_len, run, "dpo",
                               step);
  };
  if (!eval_cells.empty() && !o.resume) result.before = evaluate_now(0);

  const StopSignalScope signals(Comm::launched_by_mpi());
  int64_t step = state.step;
  std::vector<int64_t> order;
  int64_t order_epoch = -1;
  auto save = [&](int64_t at_step, double loss) {
    state.step = at_step;
    result.last_checkpoint =
        save_posttrain_state(o.run_dir, state, model, optimizer, loss, o.tokenizer_record);
  };
  double last_loss = 0;
  while (step < total_steps) {
    // The ranks stop after the same step: a signal may reach them at different moments.
    if (comm.max(stop_requested() ? 1 : 0, "stop request") != 0 ||
        (o.max_steps > 0 && result.steps_run == o.max_steps)) {
      result.interrupted = true;
      break;
    }
    const int64_t epoch = step / steps_per_epoch;
    if (epoch != order_epoch) {
      order = epoch_order(n_pairs, o.seed, epoch, 7);
      order_epoch = epoch;
    }
    const int64_t first = (step % steps_per_epoch) * o.pairs_per_step;
    const int64_t last = std::min(n_pairs, first + o.pairs_per_step);
    // This rank's slice of the step's pairs; the loss is the mean over all of them.
    const SliceRange mine = even_slice(last - first, comm.size(), comm.rank());
    model.zero_grads();
    // Sums over this rank's pairs of the loss and the metrics, to be summed over the ranks.
    std::array<double, 5> sums{};
    if (mine.size() > 0) {
      std::vector<std::vector<uint32_t>> ids;
      std::vector<std::vector<uint8_t>> marks;
      std::vector<double> ref_c, ref_r;
      for (int64_t i = first + mine.begin; i < first + mine.end; ++i) {
        const auto p = static_cast<size_t>(order[static_cast<size_t>(i)]);
        ids.push_back(rendered[p].chosen.ids);
        marks.push_back(rendered[p].chosen.loss_mask);
        ids.push_back(rendered[p].rejected.ids);
        marks.push_back(rendered[p].rejected.loss_mask);
        ref_c.push_back(reference[2 * p]);
        ref_r.push_back(reference[2 * p + 1]);
      }
      SequenceBatch batch(std::move(ids), std::move(marks), seq_len, pad);
      const std::vector<double> lp = batch.logprobs(model, window, 1.0f);
      std::vector<double> pol_c, pol_r;
      for (int64_t k = 0; k < batch.sequences(); ++k) {
        double sum = 0;
        for (int64_t j = batch.offsets()[static_cast<size_t>(k)];
             j < batch.offsets()[static_cast<size_t>(k) + 1]; ++j) {
          sum += lp[static_cast<size_t>(j)];
        }
        (k % 2 == 0 ? pol_c : pol_r).push_back(sum);
      }
      const DpoResult part = dpo_loss(DpoLogps{pol_c, pol_r, ref_c, ref_r}, o.loss, last - first);
      // Each token of a reply carries its sequence's gradient (the sequence's log-probability
      // is the sum of its tokens').
      std::vector<double> grad(lp.size());
      for (int64_t k = 0; k < batch.sequences(); ++k) {
        const double g = k % 2 == 0 ? part.grad_policy_chosen[static_cast<size_t>(k / 2)]
                                    : part.grad_policy_rejected[static_cast<size_t>(k / 2)];
        for (int64_t j = batch.offsets()[static_cast<size_t>(k)];
             j < batch.offsets()[static_cast<size_t>(k) + 1]; ++j) {
          grad[static_cast<size_t>(j)] = g;
        }
      }
      batch.backward(model, window, 1.0f, grad);
      const auto n = static_cast<double>(part.pairs);
      sums = {part.loss, part.reward_chosen * n, part.reward_rejected * n, part.reward_margin * n,
              part.reward_accuracy * n};
    }
    comm.sum_in_place(sums, "dpo loss and rewards");
    sum_gradients(comm, model.grads());
    optimizer.step(model.params(), model.grads(), step);
    const auto n_step = static_cast<double>(last - first);
    DpoResult loss;
    loss.loss = sums[0];  // each part's loss is already divided by the step's pairs
    loss.reward_chosen = sums[1] / n_step;
    loss.reward_rejected = sums[2] / n_step;
    loss.reward_margin = sums[3] / n_step;
    loss.reward_accuracy = sums[4] / n_step;
    ++step;
    ++result.steps_run;
    last_loss = loss.loss;
    DpoStepMetrics m{step,
                     loss.loss,
                     loss.reward_chosen,
                     loss.reward_rejected,
                     loss.reward_margin,
                     loss.reward_accuracy};
    result.history.push_back(m);
    if (run != nullptr) {
      run->append_metrics({{"step", step},
                           {"loss", m.loss},
                           {"rewards/chosen", m.reward_chosen},
                           {"rewards/rejected", m.reward_rejected},
                           {"rewards/margins", m.margin},
                           {"rewards/accuracies", m.accuracy}});
    }
    const bool at_end = step == total_steps;
    if (!eval_cells.empty() && (at_end || (o.eval_every > 0 && step % o.eval_every == 0))) {
      result.after = evaluate_now(step);
    }
    if (!at_end && o.checkpoint_every > 0 && step % o.checkpoint_every == 0) save(step, m.loss);
  }
  if (result.steps_run > 0) {
    save(step, last_loss);
  } else {
    result.last_checkpoint = start_checkpoint;
  }
  if (root) {
    std::fprintf(stderr, "dpo: %lld steps, last loss %.4f\n", static_cast<long long>(step),
                 last_loss);
    write_run_curves(o.run_dir,
                     {{"loss", "/loss"},
                      {"reward margin", "/rewards~1margins"},
                      {"held-out pass@1", "/eval/pass@1"}},
                     "nanogpt dpo: " + o.run_dir);
  }
  return result;
}

}  // namespace nanogpt
