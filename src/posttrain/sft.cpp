#include "posttrain/sft.hpp"

#include <unistd.h>

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
#include "posttrain/row_packing.hpp"
#include "posttrain/run_curves.hpp"
#include "posttrain/stage_ranks.hpp"
#include "posttrain/task_conversations.hpp"
#include "runtime/build_info.hpp"
#include "runtime/cpu_info.hpp"
#include "runtime/error.hpp"
#include "runtime/file_io.hpp"
#include "runtime/random.hpp"
#include "runtime/stopwatch.hpp"
#include "train/attention_window.hpp"
#include "train/run_directory.hpp"
#include "train/stop_signals.hpp"

namespace nanogpt {

namespace {

void check_options(const SftOptions& o) {
  if (o.data.empty() == o.tasks.empty()) {
    throw InputError("sft: give conversations with --data FILE.jsonl or --tasks MIXTURE (one)");
  }
  if (o.epochs < 1) throw InputError("sft: --epochs must be >= 1");
  if (o.rows_per_step < 1) throw InputError("sft: --rows-per-step must be >= 1");
  if (o.examples_per_cell < 1) throw InputError("sft: --examples must be >= 1");
  if (o.seq_len < 0) throw InputError("sft: --seq-len must be >= 0 (0: the checkpoint's)");
  if (o.evaluate) check_chat_eval_options(o.eval);
}

// The conversations to train on, and a name for each in errors.
struct Conversations {
  std::vector<Conversation> list;
  std::function<std::string(size_t)> name;
};

Conversations load_conversations(const SftOptions& o) {
  Conversations c;
  if (!o.data.empty()) {
    c.list = read_conversations_jsonl(o.data);
    const std::string path = o.data;
    c.name = [path](size_t i) { return path + ": conversation " + std::to_string(i + 1); };
    return c;
  }
  const std::vector<TaskCell> cells = parse_task_mixture(o.tasks);
  for (const TaskInstance& p :
       mixture_problems(cells, TaskSplit::kTrain, o.seed, o.examples_per_cell)) {
    c.list.push_back(task_conversation(p));
  }
  c.name = [](size_t i) { return "generated task conversation " + std::to_string(i + 1); };
  return c;
}

}  // namespace

SftResult run_sft(const SftOptions& o) {
  check_options(o);
  const PosttrainStart start = resolve_posttrain_start("sft", o.checkpoint, o.run_dir, o.resume,
                                                       o.tokenizer, o.window_blocks);
  const BpeTokenizer& tokenizer = start.tokenizer;
  const ChatTokens& chat = start.chat;
  const std::string& start_checkpoint = start.checkpoint;
  const Config& c = start.config;
  const int64_t window = start.window_blocks;
  const int64_t seq_len = o.seq_len > 0 ? o.seq_len : c.train_seq_len;
  if (seq_len % c.block_size != 0) {
    throw InputError("sft: --seq-len " + std::to_string(seq_len) + " must be a multiple of " +
                     "the model's block_size (" + std::to_string(c.block_size) + ")");
  }

  // The data: rendered, packed, its order per epoch.
  const Conversations convs = load_conversations(o);
  std::vector<RenderedConversation> rendered;
  rendered.reserve(convs.list.size());
  for (size_t i = 0; i < convs.list.size(); ++i) {
    rendered.push_back(
        render_conversation(convs.list[i], tokenizer, chat, seq_len + 1, convs.name(i)));
  }
  std::vector<PackItem> items;
  for (const RenderedConversation& r : rendered) items.push_back({r.ids, r.loss_mask});
  const PackedRows rows = pack_rows(items, seq_len, static_cast<int32_t>(chat.bos), convs.name);
  if (rows.loss_tokens == 0) {
    throw InputError("sft: no conversation has an assistant message: nothing to learn");
  }
  const int64_t steps_per_epoch = (rows.rows + o.rows_per_step - 1) / o.rows_per_step;
  const int64_t total_steps = steps_per_epoch * o.epochs;

  const nlohmann::ordered_json fields{
      {"data", o.data.empty() ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(o.data)},
      {"tasks", o.tasks.empty()
                    ? nlohmann::ordered_json(nullptr)
                    : nlohmann::ordered_json(task_mixture_string(parse_task_mixture(o.tasks)))},
      {"examples_per_cell", o.examples_per_cell},
      {"conversations", convs.list.size()},
      {"rows", rows.rows},
      {"seq_len", seq_len},
      {"loss_tokens", rows.loss_tokens},
      {"row_fill",
       static_cast<double>(rows.item_tokens) / static_cast<double>(rows.rows * (seq_len + 1))},
      {"epochs", o.epochs},
      {"rows_per_step", o.rows_per_step},
      {"steps", total_steps},
      {"lr_scale", o.lr_scale},
      {"cooldown_frac", o.cooldown_frac},
      {"seed", o.seed}};
  Comm& comm = stage_comm(o.comm);
  const bool root = comm.is_root();
  check_stage_ranks_agree(comm, "sft", fields.dump() + o.run_dir + (o.resume ? " resume" : ""),
                          start_checkpoint);

  Gpt model(c);
  load_model_weights(model, start_checkpoint);
  const Config oc = finetune_optimizer_config(c, o.lr_scale, o.cooldown_frac, total_steps);
  GptOptimizer optimizer(model.params(), oc, model.precision(), comm,
                         model.gradient_ready_stages());
  PosttrainState state;
  state.stage = "sft";
  state.seed = o.seed;
  if (o.resume) {
    state = load_posttrain_state(start_checkpoint, "sft", optimizer);
  } else {
    // Pre-training's optimizer state where the checkpoint has one.
    import_pretraining_optimizer_state(start_checkpoint, optimizer);
  }

  // Rank 0 alone writes the run directory.
  const std::optional<RunDirectory> run_directory =
      open_stage_run_directory(comm, "sft", o.run_dir, o.resume, state.step, fields, start,
                               o.tokenizer_record, o.command_line);
  const RunDirectory* run = run_directory ? &*run_directory : nullptr;

  SftResult result;
  result.steps = total_steps;
  result.conversations = static_cast<int64_t>(convs.list.size());
  result.rows = rows.rows;
  result.loss_tokens = rows.loss_tokens;
  if (root) {
    std::fprintf(stderr,
                 "sft: %zu conversations in %lld rows of %lld tokens (%.0f%% filled), %lld "
                 "assistant tokens; %lld steps of %lld rows\n",
                 convs.list.size(), static_cast<long long>(rows.rows),
                 static_cast<long long>(seq_len),
                 100.0 * static_cast<double>(rows.item_tokens) /
                     static_cast<double>(rows.rows * (seq_len + 1)),
                 static_cast<long long>(rows.loss_tokens), static_cast<long long>(total_steps),
                 static_cast<long long>(o.rows_per_step));
  }

  // Held-out evaluation (task mixtures only).
  std::vector<TaskCell> eval_cells;
  if (!o.tasks.empty() && o.evaluate) eval_cells = parse_task_mixture(o.tasks);
  std::unique_ptr<ModelScorer> scorer;
  auto evaluate_now = [&](int64_t step) {
    if (!scorer) scorer = std::make_unique<ModelScorer>(model, window);
    result.evaluated = true;
    return evaluate_and_record(*scorer, tokenizer, chat, eval_cells, o.eval, seq_len, run, "sft",
                               step);
  };
  if (!eval_cells.empty() && !o.resume) result.before = evaluate_now(0);

  const StopSignalScope signals(Comm::launched_by_mpi());
  const int64_t rows_per_pass = std::max<int64_t>(1, c.micro_batch_tokens / seq_len);
  std::vector<float> weights;
  std::vector<int32_t> inputs, targets;
  int64_t step = state.step;
  std::vector<int64_t> order;
  int64_t order_epoch = -1;
  auto save = [&](int64_t at_step, double loss) {
    state.step = at_step;
    result.last_checkpoint =
        save_posttrain_state(o.run_dir, state, model, optimizer, loss, o.tokenizer_record);
  };
  while (step < total_steps) {
    // The ranks stop after the same step: a signal may reach them at different moments.
    if (comm.max(stop_requested() ? 1 : 0, "stop request") != 0 ||
        (o.max_steps > 0 && result.steps_run == o.max_steps)) {
      result.interrupted = true;
      break;
    }
    const Stopwatch t0;
    const int64_t epoch = step / steps_per_epoch;
    if (epoch != order_epoch) {
      order = epoch_order(rows.rows, o.seed, epoch, 1);
      order_epoch = epoch;
    }
    const int64_t first = (step % steps_per_epoch) * o.rows_per_step;
    const int64_t last = std::min(rows.rows, first + o.rows_per_step);
    int64_t loss_tokens = 0;
    for (int64_t i = first; i < last; ++i) {
      for (uint8_t w : rows.row_weights(order[static_cast<size_t>(i)])) loss_tokens += w;
    }
    // This rank's slice of the step's rows; the loss is over the whole step's tokens.
    const SliceRange mine = even_slice(last - first, comm.size(), comm.rank());
    model.zero_grads();
    double loss_sum = 0;
    if (loss_tokens > 0) {
      const float scale = 1.0f / static_cast<float>(loss_tokens);
      for (int64_t i0 = first + mine.begin; i0 < first + mine.end; i0 += rows_per_pass) {
        const int64_t i1 = std::min(first + mine.end, i0 + rows_per_pass);
        inputs.clear();
        targets.clear();
        weights.clear();
        for (int64_t i = i0; i < i1; ++i) {
          const int64_t r = order[static_cast<size_t>(i)];
          const auto in = rows.row_inputs(r), tg = rows.row_targets(r);
          const auto w = rows.row_weights(r);
          inputs.insert(inputs.end(), in.begin(), in.end());
          targets.insert(targets.end(), tg.begin(), tg.end());
          for (uint8_t m : w) weights.push_back(static_cast<float>(m));
        }
        TokenLossT<float> token_loss;
        token_loss.weights = weights;
        loss_sum +=
            model.forward_backward(inputs, targets, window, scale, seq_len, nullptr, token_loss);
      }
    }
    loss_sum = comm.sum(loss_sum, "sft loss");
    sum_gradients(comm, model.grads());
    optimizer.step(model.params(), model.grads(), step);
    ++step;
    ++result.steps_run;
    const double loss = loss_tokens > 0 ? loss_sum / static_cast<double>(loss_tokens) : 0.0;
    result.last_loss = loss;
    const double step_s = t0.seconds();
    const int64_t tokens = (last - first) * seq_len;
    if (run != nullptr) {
      run->append_metrics({{"step", step},
                           {"loss", loss},
                           {"loss_tokens", loss_tokens},
                           {"step_s", step_s},
                           {"tokens_per_s", static_cast<double>(tokens) / step_s},
                           {"epoch", epoch}});
    }
    const bool live = root && o.live_line && isatty(STDERR_FILENO);
    if (live) {
      std::fprintf(stderr, "\rsft: step %lld/%lld loss %.4f %.0f tok/s   ",
                   static_cast<long long>(step), static_cast<long long>(total_steps), loss,
                   static_cast<double>(tokens) / step_s);
    }
    const bool at_end = step == total_steps;
    if (!eval_cells.empty() && (at_end || (o.eval_every > 0 && step % o.eval_every == 0))) {
      if (live) std::fputc('\n', stderr);
      result.after = evaluate_now(step);
    }
    if (!at_end && o.checkpoint_every > 0 && step % o.checkpoint_every == 0) save(step, loss);
  }
  if (root && o.live_line && isatty(STDERR_FILENO)) std::fputc('\n', stderr);
  // Always leave a checkpoint of where the run stopped (the end, or a Ctrl-C).
  if (result.steps_run > 0) {
    save(step, result.last_loss);
  } else {
    result.last_checkpoint = start_checkpoint;
  }
  if (root) {
    write_run_curves(o.run_dir,
                     {{"loss (assistant tokens)", "/loss"},
                      {"held-out pass@1", "/eval/pass@1"},
                      {"held-out reply tokens", "/eval/reply_tokens"}},
                     "nanogpt sft: " + o.run_dir);
  }
  return result;
}

}  // namespace nanogpt
