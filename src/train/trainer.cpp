#include "train/trainer.hpp"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <limits>
#include <memory>

#include "data/token_loader.hpp"
#include "model/gpt.hpp"
#include "optim/gpt_optimizer.hpp"
#include "optim/schedule.hpp"
#include "optim/streaming_diloco.hpp"
#include "runtime/checkpoint.hpp"
#include "runtime/comm.hpp"
#include "runtime/error.hpp"
#include "runtime/profiler.hpp"
#include "runtime/thread_pool.hpp"
#include "train/attention_window.hpp"
#include "train/evaluate.hpp"
#include "train/rank_agreement.hpp"
#include "train/replica_comms.hpp"
#include "train/run_directory.hpp"
#include "train/shard_meta.hpp"
#include "train/stop_signals.hpp"
#include "train/train_state.hpp"
#include "train/train_step.hpp"

namespace nanogpt {

namespace {

std::string format_duration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  long s = static_cast<long>(seconds + 0.5);
  char buf[32];
  if (s >= 3600) {
    std::snprintf(buf, sizeof buf, "%ldh%02ldm", s / 3600, (s / 60) % 60);
  } else {
    std::snprintf(buf, sizeof buf, "%ldm%02lds", s / 60, s % 60);
  }
  return buf;
}

}  // namespace

TrainResult train(const TrainOptions& options) {
  const Config& c = options.config;
  validate_config(c);
  // Under mpirun the ranks train one model on slices of each global batch; rank 0 alone
  // prints and writes (run.json, metrics.jsonl, checkpoints).
  Comm& comm = Comm::world();
  const bool root = comm.is_root();
  if (c.tokens_per_step % (comm.size() * c.train_seq_len) != 0) {
    throw InputError("tokens_per_step (" + std::to_string(c.tokens_per_step) +
                     ") must split into whole " + "sequences of train_seq_len (" +
                     std::to_string(c.train_seq_len) + ") on each of the " +
                     std::to_string(comm.size()) + " ranks; set tokens_per_step to a multiple of " +
                     std::to_string(comm.size() * c.train_seq_len) +
                     " or run on a number of ranks that divides " +
                     std::to_string(c.tokens_per_step / c.train_seq_len) + " sequences");
  }
  comm.set_progress_mode(c.comm_thread ? CommProgress::kThread : CommProgress::kPoll);
  ReplicaComms comms(comm, c);
  const bool diloco = comms.across() != nullptr;
  if (diloco) {
    // An outer sync travels while whole inner steps run: a thread keeps it moving (it sleeps
    // when nothing is in flight), where the backward's polls would only reach the replica's.
    comms.across()->set_progress_mode(CommProgress::kThread);
  }
  const StopSignalScope signals(Comm::launched_by_mpi());
  const RunDirectory run(options.run_dir);

  Gpt model(c);
  model.init_parameters(static_cast<uint64_t>(c.seed));

  LoaderOptions lo;
  lo.pattern = options.train_pattern;
  lo.batch_tokens = static_cast<uint64_t>(c.tokens_per_step);
  lo.cycle = true;  // small corpora are trained for several epochs
  lo.align_to_eot = c.align_to_eot;
  lo.seq_len = static_cast<uint64_t>(c.train_seq_len);
  lo.eot_id = static_cast<uint32_t>(c.eot_id);
  lo.vocab_size = static_cast<uint32_t>(c.vocab_size);
  lo.rank = comm.rank();
  lo.world_size = comm.size();
  TokenLoader loader(lo);
  {
    // Fail on missing or bad validation data now, not after the first hundred steps.
    LoaderOptions vo;
    vo.pattern = options.val_pattern;
    vo.batch_tokens = static_cast<uint64_t>(c.val_seq_len);
    vo.vocab_size = static_cast<uint32_t>(c.vocab_size);
    TokenLoader check(vo);
  }
  {
    std::string data;
    for (const std::string& f : loader.files()) data += f + "\n";
    check_ranks_agree(comm, {{"the nanogpt binary", executable_digest()},
                             {"the configuration", config_to_json(c).dump()},
                             {"the resolved precision", precision_name(model.precision())},
                             {"the training shards", data},
                             {"the validation pattern", options.val_pattern},
                             {"the run directory", options.run_dir},
                             {"--resume", options.resume ? "yes" : "no"},
                             {"--max-steps", std::to_string(options.max_steps)}});
  }
  GptOptimizer optimizer(model.params(), c, model.precision(), comms.replica(),
                         model.gradient_ready_stages());
  std::unique_ptr<StreamingDiloco> outer;
  OuterCheckpoint outer_ckpt;
  if (diloco) {
    outer = std::make_unique<StreamingDiloco>(model.params(), c, comms.replica(), *comms.across());
    outer_ckpt = {outer.get(), comms.across(), comms.replica_index(), comms.replica().is_root(),
                  root};
  }

  int64_t start_step = 0;
  if (options.resume) {
    std::string ckpt = find_latest_checkpoint(options.run_dir);
    if (ckpt.empty()) {
      throw InputError("--resume: no complete checkpoint under '" + options.run_dir +
                       "/checkpoints'; start without --resume");
    }
    // Every rank reads the same checkpoint (RUN_DIR on a filesystem they share).
    check_ranks_agree(comm, {{"the checkpoint to resume", ckpt}});
    start_step = load_train_state(ckpt, model, optimizer, loader, outer_ckpt);
    if (root) run.truncate_metrics(start_step);
    if (start_step >= c.num_iterations) {
      if (root) {
        std::fprintf(stderr, "run '%s' is already complete (step %lld of %lld)\n",
                     options.run_dir.c_str(), static_cast<long long>(start_step),
                     static_cast<long long>(c.num_iterations));
      }
      TrainResult done;
      done.final_step = start_step;
      done.final_val_loss = checkpoint_val_loss(ckpt);
      done.last_checkpoint = ckpt;
      return done;
    }
    if (root) {
      std::fprintf(stderr, "resuming from %s (step %lld)\n", ckpt.c_str(),
                   static_cast<long long>(start_step));
    }
  } else if (root) {
    run.start_metrics();
  }

  // The tokenizer recorded next to the training shards, so sampling can find it later.
  const std::optional<ShardMeta> shard_meta = read_shard_meta(options.train_pattern);
  const nlohmann::json tokenizer = shard_meta ? shard_meta->tokenizer : nlohmann::json(nullptr);
  RunRecord record;
  record.config = &c;
  record.precision = model.precision();
  record.command_line = options.command_line;
  record.train_pattern = options.train_pattern;
  record.val_pattern = options.val_pattern;
  record.train_files = loader.files();
  record.tokenizer = tokenizer;
  record.resumed_from_step = start_step;
  record.hosts = comm.hosts();
  if (root) run.write_run_record(record);
  if (root && comm.distributed()) {
    std::fprintf(stderr, "training on %d ranks (%d threads each; %s)\n", comm.size(),
                 ThreadPool::current().size(),
                 comm.progress_mode() == CommProgress::kThread
                     ? "a communication thread per rank"
                     : "communication polled by the backward");
  }
  if (root && diloco) {
    std::fprintf(stderr,
                 "%s: %d replicas of %d ranks; %lld fragments (%s), outer step every %lld inner "
                 "steps, delay %lld, merge alpha %g, %d-bit outer gradients\n",
                 sync_mode_name(c.sync), comms.replicas(), comms.replica().size(),
                 static_cast<long long>(c.outer_fragments()), fragment_order_name(c.fragment_order),
                 static_cast<long long>(c.sync_every), static_cast<long long>(c.outer_sync_delay()),
                 c.outer_merge_alpha(), c.outer_bits());
    for (size_t p = 0; p < outer->fragments().size(); ++p) {
      const OuterFragment& f = outer->fragments()[p];
      std::fprintf(stderr, "  fragment %zu: %zu tensors, %zu parameters, %.2f MB sent per sync\n",
                   p, f.tensors.size(), f.numel, outer->sync_bytes(p) / 1e6);
    }
  }

  const int64_t N = c.num_iterations;
  const bool live = root && options.live_line && ::isatty(STDERR_FILENO) == 1;
  TrainResult result;
  result.final_val_loss = std::numeric_limits<double>::quiet_NaN();
  std::vector<int32_t> inputs, targets;
  double last_val = std::numeric_limits<double>::quiet_NaN();
  double train_seconds = 0;
  int64_t trained_tokens = 0;
  double train_loss = std::numeric_limits<double>::quiet_NaN();
  int64_t step = start_step;

  while (step < N) {
    const int64_t W = attention_window_at(c, step);
    auto t0 = std::chrono::steady_clock::now();
    comms.reset_stats();
    {
      ProfileScope scope("train_step", "train_step", {c.tokens_per_step, W}, 0, 0);
      {
        // uint16 tokens read, int32 inputs and targets written.
        ProfileScope data("data", "loader.next", {c.tokens_per_step}, 0,
                          10.0 * static_cast<double>(c.tokens_per_step));
        loader.next(inputs, targets);
      }
      train_loss = run_train_step(model, optimizer, inputs, targets, step, W, comms.replicas());
    }
    ++step;
    const bool last = step == N;
    std::vector<int> outer_started;
    if (outer) {
      outer_started = outer->after_inner_step(model.params(), step);
      if (last) outer->finish(model.params(), step);
      // The replicas' mean (each rank holds its replica's loss).
      train_loss = comm.sum(train_loss, "training loss") / comm.size();
    }
    const double step_s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    train_seconds += step_s;
    trained_tokens += c.tokens_per_step;
    ++result.steps_run;

    nlohmann::ordered_json m;
    m["step"] = step;
    m["loss"] = train_loss;
    // The load-balancing losses of the step's last pass (summed over the MoE blocks).
    if (!c.moe_layers.empty()) m["moe_aux_loss"] = model.moe_aux_loss();
    m["lr_mult"] = lr_multiplier(step - 1, N, c.cooldown_frac);
    m["window_blocks"] = W;
    m["step_s"] = step_s;
    m["tokens_per_s"] = static_cast<double>(c.tokens_per_step) / step_s;
    // Rank 0's: the bytes it sent (every mode, 0 in a single process), the time its compute
    // waited for communication, and what was in flight meanwhile.
    const CommStats cs = comms.stats();
    m["comm_bytes"] = cs.bytes_sent;
    if (comm.distributed()) {
      m["comm_exposed_s"] = cs.waited_s;
      m["comm_hidden_s"] = cs.hidden_s();
    }
    if (!outer_started.empty()) m["outer_sync_fragments"] = outer_started;
    if (last || (c.val_loss_every > 0 && step % c.val_loss_every == 0)) {
      // DiLoCo: each replica evaluates its own parameters on the whole validation set; the
      // value is their mean (at the end they are all θ_global).
      last_val =
          evaluate(model, options.val_pattern, c.val_tokens, c.val_seq_len, W, comms.replica())
              .loss;
      if (diloco) last_val = comm.sum(last_val, "validation loss") / comm.size();
      m["val_loss"] = last_val;
    }
    const bool reached = std::isfinite(options.target_val_loss) && m.contains("val_loss") &&
                         last_val <= options.target_val_loss;
    if (root) run.append_metrics(m);
    if (live) {
      const double tps = static_cast<double>(trained_tokens) / train_seconds;
      const double eta =
          static_cast<double>(N - step) * static_cast<double>(c.tokens_per_step) / tps;
      std::fprintf(stderr, "\rstep %lld/%lld  loss %.4f  val %s  %.0f tok/s  ETA %s   ",
                   static_cast<long long>(step), static_cast<long long>(N), train_loss,
                   std::isfinite(last_val) ? std::to_string(last_val).substr(0, 6).c_str() : "-",
                   tps, format_duration(eta).c_str());
      std::fflush(stderr);
    }
    // The ranks stop after the same step: a signal may reach them at different moments.
    const bool stopping = comm.max(stop_requested() ? 1 : 0, "stop request") != 0 ||
                          (options.max_steps > 0 && result.steps_run >= options.max_steps) ||
                          reached;
    if (last || stopping || (c.checkpoint_every > 0 && step % c.checkpoint_every == 0)) {
      result.last_checkpoint = save_train_state(options.run_dir, step, model, optimizer, loader,
                                                train_loss, last_val, tokenizer, outer_ckpt);
    }
    if (stopping && !last) {
      if (live) std::fputc('\n', stderr);
      if (reached) {
        result.reached_target = true;
        if (root) {
          std::fprintf(stderr, "reached the target: validation loss %.4f <= %.4f at step %lld\n",
                       last_val, options.target_val_loss, static_cast<long long>(step));
        }
        break;
      }
      if (root) {
        std::fprintf(stderr, "stopped: finished step %lld and saved %s; continue with --resume\n",
                     static_cast<long long>(step), result.last_checkpoint.c_str());
      }
      result.interrupted = true;
      break;
    }
  }
  if (live) std::fputc('\n', stderr);
  result.final_step = step;
  result.final_val_loss = last_val;
  result.final_train_loss = train_loss;
  result.tokens_per_second =
      train_seconds > 0 ? static_cast<double>(trained_tokens) / train_seconds : 0;
  result.train_seconds = train_seconds;
  result.trained_tokens = trained_tokens;
  result.reached_target = result.reached_target || (std::isfinite(options.target_val_loss) &&
                                                    last_val <= options.target_val_loss);
  return result;
}

}  // namespace nanogpt
