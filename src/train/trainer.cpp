#include "train/trainer.hpp"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <limits>

#include "data/token_loader.hpp"
#include "kernels/gemm/microkernel.hpp"
#include "model/gpt.hpp"
#include "model/model_io.hpp"
#include "optim/gpt_optimizer.hpp"
#include "optim/schedule.hpp"
#include "runtime/build_info.hpp"
#include "runtime/checkpoint.hpp"
#include "runtime/cpu_info.hpp"
#include "runtime/error.hpp"
#include "runtime/file_io.hpp"
#include "runtime/profiler.hpp"
#include "runtime/safetensors.hpp"
#include "runtime/thread_pool.hpp"
#include "train/evaluate.hpp"

namespace nanogpt {

namespace fs = std::filesystem;

namespace {

std::atomic<bool> g_stop{false};

void on_signal(int) {
  g_stop.store(true);
}

class SignalScope {
 public:
  SignalScope() {
    struct sigaction sa {};
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, &old_int_);
    sigaction(SIGTERM, &sa, &old_term_);
  }
  ~SignalScope() {
    sigaction(SIGINT, &old_int_, nullptr);
    sigaction(SIGTERM, &old_term_, nullptr);
  }

 private:
  struct sigaction old_int_ {
  }, old_term_{};
};

// The tokenizer recorded next to the training shards (by `nanogpt tokenize`), so sampling can
// find it later.
nlohmann::json shards_tokenizer(const std::vector<std::string>& train_files) {
  if (train_files.empty()) return nullptr;
  fs::path meta = fs::path(train_files.front()).parent_path() / "meta.json";
  if (!fs::exists(meta)) return nullptr;
  try {
    auto j = nlohmann::json::parse(read_file(meta.string()));
    if (!j.contains("tokenizer")) return nullptr;
    auto t = j["tokenizer"];
    std::string spec = t.value("spec", "");
    if (!spec.empty() && spec.rfind("gpt2:", 0) != 0) t["spec"] = fs::absolute(spec).string();
    if (spec.rfind("gpt2:", 0) == 0) t["spec"] = "gpt2:" + fs::absolute(spec.substr(5)).string();
    return t;
  } catch (const std::exception&) {
    return nullptr;
  }
}

std::string first_non_finite(const Gpt& model) {
  for (const ParamTensor& t : model.params().tensors()) {
    const float* p = model.params().values().data() + t.offset;
    const float* g = model.grads().data() + t.offset;
    for (size_t i = 0; i < t.numel; ++i) {
      if (!std::isfinite(g[i]))
        return "gradient of " + t.name + " (element " + std::to_string(i) + ")";
      if (!std::isfinite(p[i]))
        return "parameter " + t.name + " (element " + std::to_string(i) + ")";
    }
  }
  return "none of the parameters or gradients (the loss itself overflowed)";
}

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

// Keeps only the metrics lines of steps up to `step`, so a resumed run's file reads as if it
// had never stopped.
void truncate_metrics(const std::string& path, int64_t step) {
  if (!file_exists(path)) return;
  std::string text = read_file(path), kept;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string::npos) break;  // a torn last line from a crash is dropped
    std::string line = text.substr(pos, end - pos);
    pos = end + 1;
    try {
      auto j = nlohmann::json::parse(line);
      if (j.value("step", int64_t{0}) <= step) kept += line + "\n";
    } catch (const nlohmann::json::exception&) {
    }
  }
  write_file_atomic(path, kept);
}

double meta_val_loss(const std::string& checkpoint) {
  auto meta = nlohmann::json::parse(read_file(checkpoint + "/meta.json"));
  return meta.contains("val_loss") && meta["val_loss"].is_number()
             ? meta["val_loss"].get<double>()
             : std::numeric_limits<double>::quiet_NaN();
}

}  // namespace

double run_train_step(Gpt& model, GptOptimizer& optimizer, std::span<const int32_t> inputs,
                      std::span<const int32_t> targets, int64_t step, int64_t window_blocks) {
  const Config& c = model.config();
  const int64_t T = c.train_seq_len;
  if (static_cast<int64_t>(inputs.size()) != c.tokens_per_step || targets.size() != inputs.size()) {
    throw Error("run_train_step: a batch must hold tokens_per_step (" +
                std::to_string(c.tokens_per_step) + ") inputs and targets, got " +
                std::to_string(inputs.size()) + " and " + std::to_string(targets.size()));
  }
  const int64_t seqs = c.tokens_per_step / T;
  const int64_t per_pass = c.sequences_per_pass(T);
  const float loss_scale = 1.0f / static_cast<float>(c.tokens_per_step);
  model.zero_grads();
  double loss_sum = 0;
  for (int64_t s = 0; s < seqs; s += per_pass) {
    const auto first = static_cast<size_t>(s * T);
    const auto count = static_cast<size_t>(std::min(per_pass, seqs - s) * T);
    // Its self time is whatever in the model no finer scope covers.
    ProfileScope scope("forward_backward", "micro_batch", {static_cast<int64_t>(count), T}, 0, 0);
    loss_sum += model.forward_backward(inputs.subspan(first, count), targets.subspan(first, count),
                                       window_blocks, loss_scale, T);
  }
  const double loss = loss_sum / static_cast<double>(c.tokens_per_step);
  if (!std::isfinite(loss)) {
    throw Error("training diverged at step " + std::to_string(step + 1) + ": loss is " +
                std::to_string(loss) + "; first non-finite tensor: " + first_non_finite(model) +
                ". Lower the learning rates (e.g. --set muon_lr=..., adam_embed_lr=...)");
  }
  optimizer.step(model.params(), model.grads(), step);
  return loss;
}

void request_stop() {
  g_stop.store(true);
}
bool stop_requested() {
  return g_stop.load();
}

TrainResult train(const TrainOptions& options) {
  const Config& c = options.config;
  validate_config(c);
  g_stop.store(false);
  SignalScope signals;
  std::error_code ec;
  fs::create_directories(options.run_dir, ec);
  if (ec) throw SystemError("cannot create run directory", options.run_dir, ec.value());

  Gpt model(c);
  model.init_parameters(static_cast<uint64_t>(c.seed));
  GptOptimizer optimizer(model.params(), c);

  LoaderOptions lo;
  lo.pattern = options.train_pattern;
  lo.batch_tokens = static_cast<uint64_t>(c.tokens_per_step);
  lo.cycle = true;  // small corpora are trained for several epochs
  lo.align_to_eot = c.align_to_eot;
  lo.seq_len = static_cast<uint64_t>(c.train_seq_len);
  lo.eot_id = static_cast<uint32_t>(c.eot_id);
  lo.vocab_size = static_cast<uint32_t>(c.vocab_size);
  TokenLoader loader(lo);
  {
    // Fail on missing or bad validation data now, not after the first hundred steps.
    LoaderOptions vo;
    vo.pattern = options.val_pattern;
    vo.batch_tokens = static_cast<uint64_t>(c.val_seq_len);
    vo.vocab_size = static_cast<uint32_t>(c.vocab_size);
    TokenLoader check(vo);
  }

  const std::string metrics_path = options.run_dir + "/metrics.jsonl";
  int64_t start_step = 0;
  if (options.resume) {
    std::string ckpt = find_latest_checkpoint(options.run_dir);
    if (ckpt.empty()) {
      throw InputError("--resume: no complete checkpoint under '" + options.run_dir +
                       "/checkpoints'; start without --resume");
    }
    Config saved = read_checkpoint_config(ckpt);
    if (config_to_json(saved) != config_to_json(c)) {
      throw InputError("--resume: the configuration differs from the checkpoint's ('" + ckpt +
                       "'); resume with the same --config and --set values (see run.json)");
    }
    load_model_weights(model, ckpt);
    SafetensorsReader opt(ckpt + "/optimizer.safetensors");
    for (auto& st : optimizer.state_tensors()) {
      *st.data = opt.read_f32(st.name, st.shape);
    }
    auto state = nlohmann::json::parse(opt.metadata_value("train_state"));
    start_step = state.at("step").get<int64_t>();
    optimizer.set_adam_steps(state.at("adam_steps").get<int64_t>());
    LoaderPosition pos;
    pos.shard = state.at("data_position").at("shard").get<uint64_t>();
    pos.pos = state.at("data_position").at("pos").get<uint64_t>();
    pos.epoch = state.at("data_position").at("epoch").get<uint64_t>();
    loader.restore(pos);
    truncate_metrics(metrics_path, start_step);
    if (start_step >= c.num_iterations) {
      std::fprintf(stderr, "run '%s' is already complete (step %lld of %lld)\n",
                   options.run_dir.c_str(), static_cast<long long>(start_step),
                   static_cast<long long>(c.num_iterations));
      TrainResult done;
      done.final_step = start_step;
      done.final_val_loss = meta_val_loss(ckpt);
      done.last_checkpoint = ckpt;
      return done;
    }
    std::fprintf(stderr, "resuming from %s (step %lld)\n", ckpt.c_str(),
                 static_cast<long long>(start_step));
  } else {
    write_file_atomic(metrics_path, "");
  }

  const nlohmann::json tokenizer = shards_tokenizer(loader.files());
  {
    nlohmann::ordered_json run;
    run["config"] = config_to_json(c);
    run["version"] = NANOGPT_VERSION;
    run["revision"] = build_revision();
    run["cpu"] = cpu_info().model_name;
    run["threads"] = ThreadPool::current().size();
    // What `precision: auto` and the ISA dispatch chose here: a resume elsewhere may differ.
    const Precision precision = resolved_precision(c);
    run["precision"] = precision_name(precision);
    run["gemm_kernel"] =
        precision == Precision::kBf16 ? active_bf16_microkernel().isa : active_microkernel().isa;
    run["command"] = options.command_line;
    run["train"] = options.train_pattern;
    run["val"] = options.val_pattern;
    run["train_files"] = loader.files();
    run["tokenizer"] = tokenizer;
    run["resumed_from_step"] = start_step;
    write_file_atomic(options.run_dir + "/run.json", run.dump(2) + "\n");
  }

  const int64_t N = c.num_iterations;
  const int64_t max_window = c.train_seq_len / c.block_size;
  auto window_at = [&](int64_t step) {
    return std::min<int64_t>(max_window, window_blocks(step, N, c.max_window_tokens, c.block_size));
  };
  auto save = [&](int64_t step, double train_loss, double val_loss) {
    CheckpointContents cc;
    cc.model = model_tensors(model);
    cc.model_metadata["format"] = "pt";
    cc.model_metadata["config"] = config_to_json(c).dump();
    cc.model_metadata["step"] = std::to_string(step);
    for (auto& st : optimizer.state_tensors())
      cc.optimizer.push_back({st.name, st.shape, st.data->data()});
    LoaderPosition pos = loader.position();
    nlohmann::json state = {
        {"step", step},
        {"adam_steps", optimizer.adam_steps()},
        {"data_position", {{"shard", pos.shard}, {"pos", pos.pos}, {"epoch", pos.epoch}}},
        {"seed", c.seed}};
    cc.optimizer_metadata["train_state"] = state.dump();
    cc.meta = {
        {"step", step},
        {"train_loss", train_loss},
        {"val_loss", std::isfinite(val_loss) ? nlohmann::json(val_loss) : nlohmann::json(nullptr)},
        {"tokenizer", tokenizer},
        {"revision", build_revision()}};
    size_t bytes = model.params().size() * sizeof(float);
    for (auto& st : optimizer.state_tensors()) bytes += st.data->size() * sizeof(float);
    ProfileScope scope("checkpoint", "checkpoint.write", {step}, 0, static_cast<double>(bytes));
    return save_checkpoint(options.run_dir, step, cc);
  };

  const bool live = options.live_line && ::isatty(STDERR_FILENO) == 1;
  TrainResult result;
  result.final_val_loss = std::numeric_limits<double>::quiet_NaN();
  std::vector<int32_t> inputs, targets;
  double last_val = std::numeric_limits<double>::quiet_NaN();
  double train_seconds = 0;
  int64_t trained_tokens = 0;
  double train_loss = std::numeric_limits<double>::quiet_NaN();
  int64_t step = start_step;

  while (step < N) {
    const int64_t W = window_at(step);
    auto t0 = std::chrono::steady_clock::now();
    {
      ProfileScope scope("train_step", "train_step", {c.tokens_per_step, W}, 0, 0);
      {
        // uint16 tokens read, int32 inputs and targets written.
        ProfileScope data("data", "loader.next", {c.tokens_per_step}, 0,
                          10.0 * static_cast<double>(c.tokens_per_step));
        loader.next(inputs, targets);
      }
      train_loss = run_train_step(model, optimizer, inputs, targets, step, W);
    }
    ++step;
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
    const bool last = step == N;
    if (last || (c.val_loss_every > 0 && step % c.val_loss_every == 0)) {
      last_val = evaluate(model, options.val_pattern, c.val_tokens, c.val_seq_len, W).loss;
      m["val_loss"] = last_val;
    }
    {
      FILE* f = std::fopen(metrics_path.c_str(), "a");
      if (f == nullptr) throw SystemError("cannot append to", metrics_path, errno);
      std::fprintf(f, "%s\n", m.dump().c_str());
      std::fclose(f);
    }
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
    const bool stopping =
        stop_requested() || (options.max_steps > 0 && result.steps_run >= options.max_steps);
    if (last || stopping || (c.checkpoint_every > 0 && step % c.checkpoint_every == 0)) {
      result.last_checkpoint = save(step, train_loss, last_val);
    }
    if (stopping && !last) {
      if (live) std::fputc('\n', stderr);
      std::fprintf(stderr, "stopped: finished step %lld and saved %s; continue with --resume\n",
                   static_cast<long long>(step), result.last_checkpoint.c_str());
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
  return result;
}

}  // namespace nanogpt
