// `nanogpt bench ...`: measurements that print JSON, compared against peers by scripts in
// bench/. Never pass/fail: the machines are shared and noisy.
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>

#include "cli/commands.hpp"
#include "data/bpe_tokenizer.hpp"
#include "kernels/gemm/kernel_rate.hpp"
#include "kernels/gemm/microkernel.hpp"
#include "model/gpt.hpp"
#include "optim/gpt_optimizer.hpp"
#include "runtime/build_info.hpp"
#include "runtime/comm.hpp"
#include "runtime/cpu_info.hpp"
#include "runtime/error.hpp"
#include "runtime/file_io.hpp"
#include "runtime/profiler.hpp"
#include "runtime/random.hpp"
#include "runtime/thread_pool.hpp"
#include "runtime/workspace.hpp"
#include "train/attention_window.hpp"
#include "train/train_step.hpp"

namespace nanogpt::cli {

namespace {

uint64_t fnv1a64_of_ids(const std::vector<uint32_t>& ids) {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (uint32_t id : ids) {
    for (int k = 0; k < 4; ++k) {
      h ^= (id >> (8 * k)) & 0xFF;
      h *= 0x100000001b3ULL;
    }
  }
  return h;
}

void register_bench_encode(CLI::App& bench) {
  auto* cmd = bench.add_subcommand("encode", "Single-thread encode throughput on a text file");
  auto tokenizer = std::make_shared<std::string>();
  auto input = std::make_shared<std::string>();
  auto repeats = std::make_shared<int>(5);
  cmd->add_option("--tokenizer", *tokenizer, "Tokenizer JSON file, or gpt2:DIR")->required();
  cmd->add_option("--input", *input, "UTF-8 text file to encode (as one ordinary text)")
      ->required()
      ->check(CLI::ExistingFile);
  cmd->add_option("--repeats", *repeats,
                  "Timed repetitions after one warm-up; the best is reported")
      ->capture_default_str()
      ->check(CLI::Range(1, 1000));
  cmd->callback([tokenizer, input, repeats] {
    BpeTokenizer tok = BpeTokenizer::load(*tokenizer);
    std::string text = read_file(*input);
    std::vector<uint32_t> ids = tok.encode(text, false);  // warm-up, and the ids to hash
    double best = 1e30;
    for (int r = 0; r < *repeats; ++r) {
      auto t0 = std::chrono::steady_clock::now();
      std::vector<uint32_t> again = tok.encode(text, false);
      double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      best = std::min(best, s);
      if (again.size() != ids.size()) throw std::runtime_error("encode is not deterministic");
    }
    char hash[17];
    std::snprintf(hash, sizeof hash, "%016llx",
                  static_cast<unsigned long long>(fnv1a64_of_ids(ids)));
    nlohmann::ordered_json j;
    j["bytes"] = text.size();
    j["tokens"] = ids.size();
    j["best_s"] = best;
    j["mb_per_s"] = text.size() / 1e6 / best;
    j["threads"] = 1;
    j["ids_fnv1a64"] = hash;
    std::printf("%s\n", j.dump().c_str());
  });
}

// The process's peak resident set so far, in bytes (Linux reports ru_maxrss in KiB): weights,
// gradients, optimizer state, activations and every workspace, as the OS saw them.
double peak_rss_bytes() {
  rusage usage{};
  return getrusage(RUSAGE_SELF, &usage) == 0 ? 1024.0 * static_cast<double>(usage.ru_maxrss) : -1;
}

// One random global batch: every sequence starts a document (EOT first, as align_to_eot gives)
// and has no other EOT, so the attention does exactly the causal/windowed work the FLOP count
// assumes. Targets are the inputs shifted by one, as the loader makes them.
void random_batch(const Config& c, Rng& rng, std::vector<int32_t>& inputs,
                  std::vector<int32_t>& targets) {
  const auto n = static_cast<size_t>(c.tokens_per_step);
  const auto T = static_cast<size_t>(c.train_seq_len);
  std::vector<int32_t> stream(n + 1);
  for (size_t i = 0; i <= n; ++i) {
    if (i % T == 0) {
      stream[i] = static_cast<int32_t>(c.eot_id);
      continue;
    }
    auto t = static_cast<int32_t>(rng.next_u64() % static_cast<uint64_t>(c.vocab_size - 1));
    stream[i] = t >= c.eot_id ? t + 1 : t;  // any id but EOT
  }
  inputs.assign(stream.begin(), stream.end() - 1);
  targets.assign(stream.begin() + 1, stream.end());
}

// Where the memory of a training run goes, as the program counts it: next to peak_rss_bytes
// (which also holds the binary, the libraries, thread stacks and the allocator's slack), so a
// user sees what grows with micro_batch_tokens and what is fixed (README, "Memory").
nlohmann::ordered_json memory_json(const Gpt& model, const GptOptimizer& optimizer) {
  const size_t weights = model.params().values().capacity() * sizeof(float);
  const size_t grads = model.grads().capacity() * sizeof(float);
  const size_t counted = weights + grads + optimizer.state_bytes() +
                         optimizer.communication_bytes() + optimizer.newton_schulz_bytes() +
                         model.activation_bytes() + model.packed_weight_bytes() +
                         model.workspace().peak_bytes() + optimizer.workspace().peak_bytes() +
                         Workspace::process_default().peak_bytes();
  nlohmann::ordered_json m;
  m["weight_bytes"] = weights;
  m["gradient_bytes"] = grads;
  m["optimizer_state_bytes"] = optimizer.state_bytes();  // this rank's share
  m["communication_bytes"] = optimizer.communication_bytes();
  m["newton_schulz_bytes"] = optimizer.newton_schulz_bytes();
  m["activation_bytes"] = model.activation_bytes();
  m["packed_weight_bytes"] = model.packed_weight_bytes();  // the head, for the fused loss
  m["model_workspace_peak_bytes"] = model.workspace().peak_bytes();
  m["optimizer_workspace_peak_bytes"] = optimizer.workspace().peak_bytes();
  m["process_workspace_peak_bytes"] = Workspace::process_default().peak_bytes();
  m["counted_bytes"] = counted;
  m["peak_rss_bytes"] = peak_rss_bytes();
  return m;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t m = v.size() / 2;
  return v.size() % 2 == 1 ? v[m] : 0.5 * (v[m - 1] + v[m]);
}

// The micro-kernel the given precision's products run on.
const MicroKernel& step_microkernel(Precision precision) {
  return precision == Precision::kBf16 ? active_bf16_microkernel() : active_microkernel();
}

nlohmann::ordered_json kernel_rate_json(const KernelRate& r) {
  nlohmann::ordered_json j;
  j["isa"] = r.isa;
  j["windows"] = r.windows;
  j["min_gflops"] = r.min_gflops;
  j["median_gflops"] = r.median_gflops;
  j["max_gflops"] = r.max_gflops;
  return j;
}

void register_bench_kernel(CLI::App& bench) {
  auto* cmd = bench.add_subcommand(
      "kernel",
      "What the host gives the GEMM micro-kernel now: one thread on L1-resident panels, in "
      "10 ms windows; prints one JSON line (GFLOP/s per thread: slowest, median, fastest window)");
  struct Args {
    double seconds = 0.5;
    std::string precision = "bf16";
  };
  auto a = std::make_shared<Args>();
  cmd->add_option("--seconds", a->seconds, "How long to probe")
      ->capture_default_str()
      ->check(CLI::Range(0.01, 60.0));
  cmd->add_option("--precision", a->precision, "The products' precision: bf16 or fp32")
      ->capture_default_str()
      ->check(CLI::IsMember({"bf16", "fp32"}));
  cmd->callback([a] {
    const Precision precision = a->precision == "bf16" ? Precision::kBf16 : Precision::kFp32;
    const double load_before = load_average();
    const KernelRate r = measure_kernel_rate(step_microkernel(precision), a->seconds);
    nlohmann::ordered_json j;
    j["bench"] = "kernel";
    j["precision"] = a->precision;
    j["kernel_rate"] = kernel_rate_json(r);
    j["cpu"] = cpu_info().model_name;
    j["loadavg_before"] = load_before;
    j["loadavg_after"] = load_average();
    j["version"] = NANOGPT_VERSION;
    j["revision"] = build_revision();
    std::printf("%s\n", j.dump().c_str());
  });
}

void register_bench_train(CLI::App& bench) {
  auto* cmd = bench.add_subcommand(
      "train",
      "Time full training steps (forward, backward, optimizer) on random tokens; prints one "
      "JSON line with tokens/s and TFLOP/s");
  struct Args {
    std::string config = "cpu";
    std::vector<std::string> sets;
    int64_t steps = 10, warmup = 2, window = 0;
    std::string precision, profile;
    double kernel_probe = 0.25;
  };
  auto a = std::make_shared<Args>();
  cmd->add_option("--config", a->config, "Preset (speedrun, cpu) or a JSON configuration file")
      ->capture_default_str();
  cmd->add_option("--set", a->sets, "Override a configuration key: --set key=value (repeatable)");
  cmd->add_option("--steps", a->steps, "Timed steps; the median is reported")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1}, int64_t{100000}));
  cmd->add_option("--warmup", a->warmup, "Untimed steps first (allocation, caches, page faults)")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{0}, int64_t{100000}));
  cmd->add_option("--window", a->window,
                  "Attention window of the long layers in blocks of block_size tokens (short "
                  "layers: half); default the whole sequence, train_seq_len / block_size")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  cmd->add_option("--precision", a->precision,
                  "Override the configuration's precision: fp32, bf16 or auto");
  cmd->add_option("--profile", a->profile,
                  "Profile the timed steps: write a Chrome trace to this file and print where "
                  "the time went to stderr");
  cmd->add_option("--kernel-probe", a->kernel_probe,
                  "Seconds to time the GEMM micro-kernel alone before and after the steps "
                  "(kernel_rate_before/after: what the host gave it; 0: skip)")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 60.0));
  cmd->callback([a] {
    if (a->kernel_probe > 0 && a->kernel_probe < 0.01) {
      throw InputError("--kernel-probe " + std::to_string(a->kernel_probe) +
                       ": must be 0 (skip) or at least 0.01 seconds (one timing window)");
    }
    Config c = load_config(a->config);
    for (const auto& s : a->sets) set_config_value(c, s);
    if (!a->precision.empty()) set_config_value(c, "precision=" + a->precision);
    validate_config(c);
    const int64_t max_window = max_window_blocks(c);
    const int64_t window = a->window == 0 ? max_window : a->window;
    if (window < 1 || window > max_window) {
      throw InputError("--window " + std::to_string(a->window) + ": must be between 1 and " +
                       std::to_string(max_window) + " blocks (train_seq_len " +
                       std::to_string(c.train_seq_len) + " / block_size " +
                       std::to_string(c.block_size) + ")");
    }
    const int64_t total_steps = a->warmup + a->steps;
    // The schedules (learning-rate cooldown, momentum warm-up) need the steps to lie in the run.
    c.num_iterations = std::max(c.num_iterations, total_steps);
    // Under mpirun: every rank draws the same global batch and trains on its slice; rank 0
    // profiles and prints.
    Comm& comm = Comm::world();
    if (c.tokens_per_step % (comm.size() * c.train_seq_len) != 0) {
      throw InputError("tokens_per_step (" + std::to_string(c.tokens_per_step) +
                       ") must be a multiple of ranks × train_seq_len (" +
                       std::to_string(comm.size() * c.train_seq_len) + ")");
    }
    comm.set_progress_mode(c.comm_thread ? CommProgress::kThread : CommProgress::kPoll);
    ProfileSession profile(comm.is_root() ? a->profile : std::string(), /*start_now=*/false);

    Gpt model(c);
    model.init_parameters(static_cast<uint64_t>(c.seed));
    GptOptimizer optimizer(model.params(), c, model.precision(), comm,
                           model.gradient_ready_stages());
    const auto local = static_cast<size_t>(c.tokens_per_step / comm.size());
    const size_t first = local * static_cast<size_t>(comm.rank());
    CommStats comm_total;
    // Seeded from the config, but a stream apart from the one that initialises the weights.
    Rng rng(static_cast<uint64_t>(c.seed) ^ 0x6265'6e63'6874'7261ULL);
    std::vector<int32_t> inputs, targets;
    std::vector<double> times;
    double loss = 0;
    const double load_before = load_average();
    const MicroKernel& kernel = step_microkernel(model.precision());
    const bool probe = a->kernel_probe > 0 && comm.is_root();
    const KernelRate rate_before =
        probe ? measure_kernel_rate(kernel, a->kernel_probe) : KernelRate{};
    for (int64_t step = 0; step < total_steps; ++step) {
      random_batch(c, rng, inputs, targets);
      if (step == a->warmup) profile.start();
      comm.reset_stats();
      const auto t0 = std::chrono::steady_clock::now();
      {
        ProfileScope scope("train_step", "train_step", {c.tokens_per_step, window}, 0, 0);
        loss = run_train_step(model, optimizer, std::span(inputs).subspan(first, local),
                              std::span(targets).subspan(first, local), step, window);
      }
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (step >= a->warmup) {
        times.push_back(s);
        const CommStats cs = comm.stats();
        comm_total.busy_s += cs.busy_s;
        comm_total.waited_s += cs.waited_s;
        comm_total.bytes_sent += cs.bytes_sent;
      }
    }
    const double load_after = load_average();
    profile.finish();
    const KernelRate rate_after =
        probe ? measure_kernel_rate(kernel, a->kernel_probe) : KernelRate{};

    const FlopCount flops = train_step_flops(c, window);
    const double med = median(times);
    nlohmann::ordered_json j;
    j["bench"] = "train";
    j["config"] = a->config;
    j["sets"] = a->sets;
    j["precision"] = precision_name(model.precision());
    j["tokens_per_step"] = c.tokens_per_step;
    j["seq_len"] = c.train_seq_len;
    j["window_blocks"] = window;
    j["steps"] = a->steps;
    j["warmup"] = a->warmup;
    j["median_step_s"] = med;
    j["min_step_s"] = *std::min_element(times.begin(), times.end());
    j["max_step_s"] = *std::max_element(times.begin(), times.end());
    j["tokens_per_s"] = static_cast<double>(c.tokens_per_step) / med;
    j["flops_per_step"] = flops.total();
    j["tflops"] = flops.total() / med / 1e12;
    j["model_flops_per_step"] = flops.model();
    j["model_tflops"] = flops.model() / med / 1e12;
    j["flops"] = flops.to_json();
    j["loss"] = loss;
    j["threads"] = ThreadPool::current().size();  // per rank
    j["ranks"] = comm.size();
    if (comm.distributed()) {
      // Rank 0's, per timed step: time its compute waited for communication (exposed), time
      // communication ran while it computed (hidden), and the bytes it sent.
      const auto n = static_cast<double>(times.size());
      j["comm_thread"] = comm.progress_mode() == CommProgress::kThread;
      j["comm_exposed_s"] = comm_total.waited_s / n;
      j["comm_hidden_s"] = comm_total.hidden_s() / n;
      j["comm_exposed_share"] = comm_total.waited_s / n / med;
      j["comm_bytes_per_rank_per_step"] = comm_total.bytes_sent / n;
    }
    // The GEMM micro-kernel the step's products run on.
    j["isa"] = kernel.isa;
    if (probe) {
      // The micro-kernel's own rate just before and after the timed steps: a step that ran
      // while the host slowed the kernel down shows here, not as a change of ours.
      j["kernel_rate_before"] = kernel_rate_json(rate_before);
      j["kernel_rate_after"] = kernel_rate_json(rate_after);
    }
    j["cpu"] = cpu_info().model_name;
    j["loadavg_before"] = load_before;
    j["loadavg_after"] = load_after;
    j["peak_rss_bytes"] = peak_rss_bytes();
    j["memory"] = memory_json(model, optimizer);
    j["version"] = NANOGPT_VERSION;
    j["revision"] = build_revision();
    if (comm.is_root()) std::printf("%s\n", j.dump().c_str());
  });
}

}  // namespace

void register_bench(CLI::App& app) {
  auto* bench = app.add_subcommand("bench", "Benchmarks that print one JSON line each");
  bench->require_subcommand(1);
  register_bench_encode(*bench);
  register_bench_train(*bench);
  register_bench_kernel(*bench);
  register_bench_comm(*bench);
  register_bench_rollout(*bench);
}

}  // namespace nanogpt::cli
