// `nanogpt bench comm`: how fast the ranks of an MPI job all-reduce, and what that predicts
// for data-parallel training beyond this machine.
//
//   mpirun -np 2 nanogpt bench comm                    # shared memory between the ranks
//   mpirun -np 2 --mca btl self,tcp nanogpt bench comm # the TCP path between machines
//   nanogpt bench comm --project --fit FIT.json        # the speedrun model on 2..256 nodes
//
// Measuring: float32 all-reduces (sum) of 4 KiB .. 256 MiB through Comm::world(), each size
// timed --repeats times (the slowest rank's time of each, then the median), and the ring model
// fitted to them (train/comm_projection.hpp). Projecting: the model of
// train/comm_projection.hpp on the speedrun configuration's parameters, for a per-node compute
// time given (--step-seconds) or measured here by `nanogpt bench train` in a child process.
#include <sys/wait.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "cli/commands.hpp"
#include "config/config.hpp"
#include "model/flop_count.hpp"
#include "model/gpt.hpp"
#include "optim/fragment_plan.hpp"
#include "optim/outer_grad_codec.hpp"
#include "runtime/build_info.hpp"
#include "runtime/comm.hpp"
#include "runtime/cpu_info.hpp"
#include "runtime/error.hpp"
#include "runtime/file_io.hpp"
#include "train/comm_projection.hpp"
#include "train/train_step.hpp"

namespace nanogpt::cli {

namespace {

using Clock = std::chrono::steady_clock;

double median_of(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t m = v.size() / 2;
  return v.size() % 2 == 1 ? v[m] : 0.5 * (v[m - 1] + v[m]);
}

std::string human_bytes(double b) {
  char s[32];
  if (b >= 1 << 30) {
    std::snprintf(s, sizeof s, "%.0f GiB", b / (1 << 30));
  } else if (b >= 1 << 20) {
    std::snprintf(s, sizeof s, "%.0f MiB", b / (1 << 20));
  } else {
    std::snprintf(s, sizeof s, "%.0f KiB", b / (1 << 10));
  }
  return s;
}

struct MeasureArgs {
  int64_t min_bytes = 4 << 10, max_bytes = int64_t{256} << 20;
  int factor = 4;
  int repeats = 10;
  double max_seconds = 5;  // per size, after which fewer repeats are taken (at least 3)
  std::string progress = "thread";
};

void measure(const MeasureArgs& a) {
  Comm& world = Comm::world();
  if (!world.distributed()) {
    throw InputError(
        "bench comm times all-reduces between the ranks of an MPI job: run it under a launcher, "
        "e.g. `mpirun -np 2 nanogpt bench comm` (as root in a container add --allow-run-as-root "
        "--oversubscribe --bind-to none), or give --project for the scaling projection");
  }
  if (a.min_bytes < 4 || a.min_bytes > a.max_bytes || a.min_bytes % 4 != 0) {
    throw InputError("--min-bytes " + std::to_string(a.min_bytes) + " / --max-bytes " +
                     std::to_string(a.max_bytes) +
                     ": need 4 <= min <= max, a multiple of 4 (float32 elements)");
  }
  if (a.progress != "thread" && a.progress != "poll") {
    throw InputError("--progress '" + a.progress + "': thread or poll");
  }
  world.set_progress_mode(a.progress == "poll" ? CommProgress::kPoll : CommProgress::kThread);
  const int N = world.size();
  const double load_before = load_average();

  std::vector<AllreduceSample> samples;
  nlohmann::ordered_json sizes = nlohmann::ordered_json::array();
  if (world.is_root()) {
    std::printf(
        "all-reduce (sum, float32) over %d ranks, progress by %s; the slowest rank's time\n", N,
        a.progress.c_str());
    std::printf("%10s %8s %12s %12s %12s %12s\n", "bytes", "repeats", "median us", "min us",
                "algbw GB/s", "busbw GB/s");
  }
  for (int64_t bytes = a.min_bytes; bytes <= a.max_bytes; bytes *= a.factor) {
    std::vector<float> data(static_cast<size_t>(bytes / 4));
    std::vector<double> times;
    double spent = 0;
    // One untimed round first (buffers, connections), checked: every element is N.
    for (int r = -1; r < a.repeats; ++r) {
      if (r >= 3 && spent > a.max_seconds) break;  // the same decision on every rank: see below
      std::fill(data.begin(), data.end(), 1.0f);
      world.barrier("bench comm: line up the ranks");
      const Clock::time_point t0 = Clock::now();
      world.wait(world.start_allreduce_sum(data, "bench comm: all-reduce"));
      const int64_t ns =
          std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - t0).count();
      // The slowest rank's time: the same number on every rank, so every rank takes the same
      // number of repeats.
      const double s = 1e-9 * static_cast<double>(world.max(ns, "bench comm: slowest rank"));
      if (r < 0) {
        const auto bad = std::find_if(data.begin(), data.end(),
                                      [&](float v) { return v != static_cast<float>(N); });
        if (bad != data.end()) {
          throw Error("bench comm: the all-reduce of " + std::to_string(bytes) + " bytes gave " +
                      std::to_string(*bad) + " at element " + std::to_string(bad - data.begin()) +
                      ", not " + std::to_string(N));
        }
        continue;
      }
      times.push_back(s);
      spent += s;
    }
    const double med = median_of(times);
    const double best = *std::min_element(times.begin(), times.end());
    const double b = static_cast<double>(bytes);
    const double busbw = 2.0 * (N - 1) / N * b / med;
    samples.push_back({b, med});
    nlohmann::ordered_json row;
    row["bytes"] = bytes;
    row["repeats"] = times.size();
    row["median_s"] = med;
    row["min_s"] = best;
    row["algbw_bytes_per_s"] = b / med;
    row["busbw_bytes_per_s"] = busbw;
    sizes.push_back(row);
    if (world.is_root()) {
      std::printf("%10s %8zu %12.1f %12.1f %12.3f %12.3f\n", human_bytes(b).c_str(), times.size(),
                  med * 1e6, best * 1e6, b / med / 1e9, busbw / 1e9);
    }
  }
  const double load_after = load_average();
  if (!world.is_root()) return;

  nlohmann::ordered_json j;
  j["bench"] = "comm";
  j["ranks"] = N;
  j["hosts"] = world.hosts();
  const char* btl = std::getenv("OMPI_MCA_btl");  // what `mpirun --mca btl ...` chose
  j["btl"] = btl != nullptr ? btl : "default";
  j["progress"] = a.progress;
  j["sizes"] = sizes;
  if (samples.size() >= 2) {
    const AllreduceFit fit = fit_ring_allreduce(samples, N);
    std::printf(
        "ring model t(n) = 2(N-1)·alpha + 2(N-1)/N·n/beta, least squares on the relative "
        "error: alpha %.2f us per hop, beta %.3f GB/s; largest misfit %.0f%%\n",
        fit.link.alpha_s * 1e6, fit.link.beta_bytes_per_s / 1e9, 100 * fit.max_relative_error);
    j["model"] = "t(n) = 2(N-1)*alpha + 2(N-1)/N*n/beta";
    j["alpha_s"] = fit.link.alpha_s;
    j["beta_bytes_per_s"] = fit.link.beta_bytes_per_s;
    j["fit_max_relative_error"] = fit.max_relative_error;
  }
  j["cpu"] = cpu_info().model_name;
  j["loadavg_before"] = load_before;
  j["loadavg_after"] = load_after;
  j["version"] = NANOGPT_VERSION;
  j["revision"] = build_revision();
  std::printf("%s\n", j.dump().c_str());
}

// ---------------------------------------------------------------------------------------------
// --project

struct ProjectArgs {
  std::string config = "speedrun";
  std::string fit;
  double step_seconds = 0;
  int64_t measure_seq_len = 1024, measure_tokens = 8192, measure_steps = 2;
  double hop_latency_us = 5;
  std::vector<double> links_gbit = {10, 100, 400};
  double link_efficiency = 0.9;
  double bucket_mb = 25;
  int max_nodes = 256;
  bool diloco = false;  // also project DiLoCo and Streaming DiLoCo at diloco_nodes
  int diloco_nodes = 2;
};

// The outer-sync modes `--diloco` projects, as bench/diloco_modes.py trains them.
struct OuterMode {
  const char* name;
  int64_t fragments, sync_every, delay;
  int bits;
};
constexpr OuterMode kOuterModes[] = {{"diloco H=30, 32-bit", 1, 30, 0, 32},
                                     {"diloco H=100, 32-bit", 1, 100, 0, 32},
                                     {"streaming P=2 H=30 tau=1, 4-bit", 2, 30, 1, 4},
                                     {"streaming P=3 H=30 tau=1, 4-bit", 3, 30, 1, 4}};

// The JSON line `nanogpt bench train` prints for the projection's model at the measured shape,
// run as a child process of this binary: the very code path a user times with `bench train`.
nlohmann::json measure_train_step(const ProjectArgs& a) {
  if (Comm::launched_by_mpi()) {
    throw InputError(
        "bench comm --project measures the training step in a child process, which cannot run "
        "inside an MPI job: run `nanogpt bench comm --project` without mpirun, or give "
        "--step-seconds");
  }
  // This binary's path, resolved here: in the child's shell /proc/self/exe is the shell.
  std::error_code ec;
  const std::string self = std::filesystem::read_symlink("/proc/self/exe", ec).string();
  if (ec || self.find('\'') != std::string::npos || a.config.find('\'') != std::string::npos) {
    throw InputError("bench comm: cannot quote this binary's path or --config for `bench train`" +
                     (ec ? " (" + ec.message() + ")" : std::string()) +
                     "; give the step time with --step-seconds instead");
  }
  std::ostringstream cmd;
  cmd << "'" << self << "' bench train --config '" << a.config
      << "' --set train_seq_len=" << a.measure_seq_len
      << " --set tokens_per_step=" << a.measure_tokens << " --steps " << a.measure_steps
      << " --warmup 1";
  std::fprintf(stderr, "bench comm: measuring the step: %s\n", cmd.str().c_str());
  FILE* pipe = ::popen(cmd.str().c_str(), "r");
  if (pipe == nullptr) throw SystemError("starting `bench train`", self, errno);
  std::string out;
  char buf[4096];
  while (size_t n = std::fread(buf, 1, sizeof buf, pipe)) out.append(buf, n);
  const int status = ::pclose(pipe);
  if (status != 0) {
    throw Error("bench comm: `" + cmd.str() + "` failed (status " + std::to_string(status) +
                "); give the step time with --step-seconds instead");
  }
  const size_t brace = out.rfind("{\"bench\":\"train\"");
  if (brace == std::string::npos) {
    throw Error("bench comm: `" + cmd.str() +
                "` printed no JSON line; give the step time with --step-seconds instead");
  }
  return nlohmann::json::parse(out.substr(brace, out.find('\n', brace) - brace));
}

std::string format_efficiency(double e) {
  char s[16];
  std::snprintf(s, sizeof s, "%.0f%%", 100 * e);
  return s;
}

void project(const ProjectArgs& a) {
  if (a.measure_seq_len < 1 || a.measure_tokens < a.measure_seq_len ||
      a.measure_tokens % a.measure_seq_len != 0) {
    throw InputError("--measure-tokens " + std::to_string(a.measure_tokens) +
                     " must be a positive multiple of --measure-seq-len " +
                     std::to_string(a.measure_seq_len));
  }
  if (!(a.link_efficiency > 0 && a.link_efficiency <= 1)) {
    throw InputError("--link-efficiency must be in (0, 1]");
  }
  for (double g : a.links_gbit) {
    if (!(g > 0)) throw InputError("--links: link rates in Gbit/s must be positive");
  }
  const Config global = load_config(a.config);  // the global batch: its tokens_per_step
  const int64_t batch = global.tokens_per_step;

  // FLOP shares of the step at the measured sequence length over the whole global batch:
  // Newton–Schulz's part of the step, the backward's part of forward + backward, the head's
  // part of the backward.
  Config shape = global;
  set_config_value(shape, "train_seq_len=" + std::to_string(a.measure_seq_len));
  set_config_value(shape, "tokens_per_step=" + std::to_string(batch - batch % a.measure_seq_len));
  validate_config(shape);
  const int64_t window = shape.train_seq_len / shape.block_size;
  const FlopCount f = train_step_flops(shape, window);
  const double backward_flops =
      f.linear_bwd + f.attention_bwd + f.attention_bwd_recompute + f.lm_head_bwd;
  const double fwd_bwd_flops = f.forward() + backward_flops;
  NodeWork work;
  work.backward_share = backward_flops / fwd_bwd_flops;
  const double head_share = f.lm_head_bwd / backward_flops;
  const double ns_share = f.newton_schulz / f.total();

  nlohmann::ordered_json measured;
  std::string step_source;
  if (a.step_seconds > 0) {
    work.step_s = a.step_seconds;
    step_source = "given (--step-seconds)";
  } else {
    const nlohmann::json m = measure_train_step(a);
    const double t = m.at("median_step_s").get<double>();
    // The measured step's Newton–Schulz part by its FLOP share; the rest scales with tokens.
    const double ns =
        t * m.at("flops").at("newton_schulz").get<double>() / m.at("flops_per_step").get<double>();
    work.step_s =
        ns + (t - ns) * static_cast<double>(batch) / static_cast<double>(a.measure_tokens);
    step_source = "measured: bench train at " + std::to_string(a.measure_tokens) + " tokens (T " +
                  std::to_string(a.measure_seq_len) + ") took " + std::to_string(t) +
                  " s, scaled to " + std::to_string(batch) + " tokens";
    for (const char* k : {"median_step_s", "tokens_per_s", "precision", "threads", "cpu",
                          "loadavg_before", "loadavg_after", "revision"}) {
      if (m.contains(k)) measured[k] = m[k];
    }
  }
  work.newton_schulz_s = work.step_s * ns_share;

  // The parameters as the model lays them out (allocated once here; the layout is the model's).
  std::vector<GradientTensor> grads;
  double param_bytes = 0, matrix_bytes = 0;
  int64_t matrices = 0;
  std::vector<OuterSyncPlan> outer_plans;
  {
    const Gpt model(shape);
    grads = gradients_in_backward_order(model.params().tensors(), shape, head_share);
    for (const OuterMode& mode : kOuterModes) {
      OuterSyncPlan plan;
      plan.sync_every = mode.sync_every;
      plan.delay = mode.delay;
      for (const OuterFragment& fragment :
           plan_fragments(model.params().tensors(), shape.num_layers, mode.fragments,
                          FragmentOrder::kStrided)) {
        plan.fragment_bytes.push_back(
            static_cast<double>(a.diloco_nodes - 1) *
            static_cast<double>(outer_grad_encoded_bytes(fragment.numel, mode.bits)));
      }
      outer_plans.push_back(plan);
    }
  }
  for (const GradientTensor& g : grads) {
    param_bytes += g.bytes;
    if (g.muon_matrices > 0) {
      matrix_bytes += g.bytes;
      matrices += g.muon_matrices;
    }
  }
  const std::vector<GradientBucket> buckets = make_buckets(grads, a.bucket_mb * 1e6);

  std::vector<std::pair<std::string, RingLink>> links;
  for (double g : a.links_gbit) {
    char name[64];
    std::snprintf(name, sizeof name, "%g Gbit/s", g);
    links.push_back({name, {a.hop_latency_us * 1e-6, g * 1e9 / 8 * a.link_efficiency}});
  }
  nlohmann::json fit;
  if (!a.fit.empty()) {
    const std::string text = read_file(a.fit);
    const size_t brace = text.rfind("{\"bench\":\"comm\"");
    if (brace == std::string::npos) {
      throw InputError("--fit " + a.fit +
                       ": no `bench comm` JSON line in it; save the output of `mpirun -np 2 "
                       "nanogpt bench comm` to that file");
    }
    fit = nlohmann::json::parse(text.substr(brace, text.find('\n', brace) - brace));
    if (!fit.contains("alpha_s")) throw InputError("--fit " + a.fit + ": the line has no fit");
    links.push_back({"fit (" + fit.value("btl", std::string("?")) + ")",
                     {fit["alpha_s"].get<double>(), fit["beta_bytes_per_s"].get<double>()}});
  }

  std::printf(
      "Projection: data-parallel `%s` model on N nodes, strong scaling of its global batch "
      "(%lld tokens per step).\n",
      a.config.c_str(), static_cast<long long>(batch));
  std::printf(
      "  parameters %.1f M: gradients %.0f MB all-reduced in %zu buckets of <= %g MB (in backward "
      "order);\n  Muon: %lld matrices, %.0f MB all-gathered after Newton–Schulz.\n",
      param_bytes / 4e6, param_bytes / 1e6, buckets.size(), a.bucket_mb,
      static_cast<long long>(matrices), matrix_bytes / 1e6);
  std::printf(
      "  one node, whole global batch: S = %.3f s per step (%s); Newton–Schulz %.1f%% of it by "
      "FLOPs; backward %.1f%% of forward+backward, the head %.1f%% of the backward.\n",
      work.step_s, step_source.c_str(), 100 * ns_share, 100 * work.backward_share,
      100 * head_share);
  std::printf(
      "  Model: ring all-reduce 2(N-1)a + 2(N-1)/N n/b, all-gather (N-1)a + (N-1)/N n/b; compute "
      "(S - S_ns)/N; Newton–Schulz S_ns ceil(M/N)/M;\n  buckets back to back on the link, with "
      "overlap each starting when its gradients are final, without after the backward;\n  step "
      "= compute + exposed reduction + optimizer; efficiency = S / (N step). Links: b = %.0f%% "
      "of the line rate, a = %g us per hop (fit: as measured here).\n\n",
      100 * a.link_efficiency, a.hop_latency_us);

  std::vector<int> nodes_list;
  for (int n = 1; n <= a.max_nodes; n *= 2) nodes_list.push_back(n);
  nlohmann::ordered_json table = nlohmann::ordered_json::array();
  for (const auto& [name, link] : links) {
    std::printf("%s (a %.2f us, b %.2f GB/s)\n", name.c_str(), link.alpha_s * 1e6,
                link.beta_bytes_per_s / 1e9);
    std::printf("%6s %10s %10s %10s %10s | %10s %10s %6s | %10s %10s %6s\n", "nodes", "compute s",
                "optim s", "reduce s", "MB/node", "exposed s", "step s", "eff", "exposed s",
                "step s", "eff");
    std::printf("%6s %10s %10s %10s %10s | %29s | %29s\n", "", "", "", "", "", "without overlap",
                "with overlap");
    for (int n : nodes_list) {
      const ProjectedStep off = predict_step(work, buckets, matrix_bytes, matrices, n, link, false);
      const ProjectedStep on = predict_step(work, buckets, matrix_bytes, matrices, n, link, true);
      std::printf("%6d %10.4f %10.4f %10.4f %10.1f | %10.4f %10.4f %6s | %10.4f %10.4f %6s\n", n,
                  on.compute_s, on.optimizer_s, on.reduce_s, on.bytes_per_node / 1e6,
                  off.reduce_exposed_s, off.step_s, format_efficiency(off.efficiency).c_str(),
                  on.reduce_exposed_s, on.step_s, format_efficiency(on.efficiency).c_str());
      nlohmann::ordered_json row;
      row["link"] = name;
      row["alpha_s"] = link.alpha_s;
      row["beta_bytes_per_s"] = link.beta_bytes_per_s;
      row["nodes"] = n;
      row["compute_s"] = on.compute_s;
      row["reduce_s"] = on.reduce_s;
      row["allgather_s"] = on.allgather_s;
      row["newton_schulz_s"] = on.newton_schulz_s;
      row["bytes_per_node"] = on.bytes_per_node;
      row["no_overlap"] = {{"exposed_s", off.reduce_exposed_s},
                           {"optimizer_s", off.optimizer_s},
                           {"step_s", off.step_s},
                           {"efficiency", off.efficiency}};
      row["overlap"] = {{"exposed_s", on.reduce_exposed_s},
                        {"optimizer_s", on.optimizer_s},
                        {"step_s", on.step_s},
                        {"efficiency", on.efficiency}};
      table.push_back(row);
    }
    std::printf("\n");
  }
  nlohmann::ordered_json outer_table = nlohmann::ordered_json::array();
  if (a.diloco) {
    const int n = a.diloco_nodes;
    std::printf(
        "DiLoCo and Streaming DiLoCo on %d nodes (one replica each): compute (S - S_ns)/N + S_ns "
        "(each replica runs the whole optimizer); a sync all-gathers each fragment's encoded outer "
        "gradient, (N-1)a + bytes/b; diloco waits for it every H steps, streaming hides tau "
        "steps of compute behind each fragment.\n",
        n);
    std::printf("%-34s %-16s %10s %10s %12s %12s %10s\n", "mode", "link", "compute s", "sync s",
                "MB/step", "peak MB", "step s");
    for (const auto& [name, link] : links) {
      const ProjectedStep ddp = predict_step(work, buckets, matrix_bytes, matrices, n, link, true);
      std::printf("%-34s %-16s %10.3f %10s %12.1f %12.1f %10.3f\n", "ddp (overlapped)",
                  name.c_str(), ddp.compute_s + ddp.optimizer_s, "-", ddp.bytes_per_node / 1e6,
                  ddp.bytes_per_node / 1e6, ddp.step_s);
      outer_table.push_back({{"mode", "ddp"},
                             {"link", name},
                             {"step_s", ddp.step_s},
                             {"bytes_per_step", ddp.bytes_per_node}});
      for (size_t k = 0; k < outer_plans.size(); ++k) {
        const ProjectedOuterStep o = predict_outer_step(work, outer_plans[k], n, link);
        std::printf("%-34s %-16s %10.3f %10.3f %12.3f %12.1f %10.3f\n", kOuterModes[k].name,
                    name.c_str(), o.compute_s, o.sync_s, o.bytes_per_step / 1e6, o.peak_bytes / 1e6,
                    o.step_s);
        outer_table.push_back({{"mode", kOuterModes[k].name},
                               {"link", name},
                               {"compute_s", o.compute_s},
                               {"sync_s", o.sync_s},
                               {"step_s", o.step_s},
                               {"bytes_per_step", o.bytes_per_step},
                               {"peak_bytes", o.peak_bytes}});
      }
    }
    std::printf("\n");
  }
  nlohmann::ordered_json j;
  j["bench"] = "comm_projection";
  j["config"] = a.config;
  j["global_tokens_per_step"] = batch;
  j["parameter_bytes"] = param_bytes;
  j["muon_matrix_bytes"] = matrix_bytes;
  j["muon_matrices"] = matrices;
  j["buckets"] = buckets.size();
  j["bucket_mb"] = a.bucket_mb;
  j["step_s_one_node"] = work.step_s;
  j["step_source"] = step_source;
  if (!measured.empty()) j["measured"] = measured;
  j["newton_schulz_share"] = ns_share;
  j["backward_share"] = work.backward_share;
  j["head_backward_share"] = head_share;
  j["link_efficiency"] = a.link_efficiency;
  j["hop_latency_s"] = a.hop_latency_us * 1e-6;
  if (!fit.is_null()) j["fit"] = fit;
  j["table"] = table;
  if (a.diloco) j["outer_sync"] = outer_table;
  j["version"] = NANOGPT_VERSION;
  j["revision"] = build_revision();
  std::printf("%s\n", j.dump().c_str());
}

}  // namespace

void register_bench_comm(CLI::App& bench) {
  auto* cmd = bench.add_subcommand(
      "comm",
      "Time all-reduces between MPI ranks (run under mpirun) and fit latency and bandwidth; "
      "with --project, predict data-parallel training of the speedrun model on 2..256 nodes");
  auto m = std::make_shared<MeasureArgs>();
  auto p = std::make_shared<ProjectArgs>();
  auto projecting = std::make_shared<bool>(false);
  cmd->add_option("--min-bytes", m->min_bytes, "Smallest message")->capture_default_str();
  cmd->add_option("--max-bytes", m->max_bytes, "Largest message")->capture_default_str();
  cmd->add_option("--factor", m->factor, "Each size this many times the previous")
      ->capture_default_str()
      ->check(CLI::IsMember({2, 4}));
  cmd->add_option("--repeats", m->repeats, "Timed all-reduces per size; the median is reported")
      ->capture_default_str()
      ->check(CLI::Range(1, 100000));
  cmd->add_option("--max-seconds", m->max_seconds,
                  "Per size: stop repeating after this long (at least 3 repeats)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd->add_option("--progress", m->progress,
                  "Who advances the collectives: a communication thread, or the waiting caller "
                  "(poll)")
      ->capture_default_str();
  cmd->add_flag("--project", *projecting,
                "Print the scaling projection instead of measuring (run without mpirun)");
  cmd->add_option("--config", p->config, "--project: the model (preset or JSON file)")
      ->capture_default_str();
  cmd->add_option("--fit", p->fit,
                  "--project: a file holding `bench comm`'s JSON line; adds its fitted link")
      ->check(CLI::ExistingFile);
  cmd->add_option("--step-seconds", p->step_seconds,
                  "--project: one node's compute time for one step of the whole global batch; "
                  "default: measured by `bench train` at --measure-tokens and scaled")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--measure-seq-len", p->measure_seq_len, "--project: T of the measured step")
      ->capture_default_str();
  cmd->add_option("--measure-tokens", p->measure_tokens, "--project: tokens of the measured step")
      ->capture_default_str();
  cmd->add_option("--measure-steps", p->measure_steps,
                  "--project: timed steps of the measurement (after one warm-up; median)")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1}, int64_t{1000}));
  cmd->add_option("--hop-latency-us", p->hop_latency_us,
                  "--project: per-hop latency of the network links, microseconds")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--links", p->links_gbit, "--project: link rates, Gbit/s")
      ->capture_default_str()
      ->delimiter(',');
  cmd->add_option("--link-efficiency", p->link_efficiency,
                  "--project: the share of a link's line rate a ring all-reduce achieves")
      ->capture_default_str();
  cmd->add_option("--bucket-mb", p->bucket_mb, "--project: gradient bucket size, MB (the seed: 25)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd->add_option("--max-nodes", p->max_nodes, "--project: largest N (powers of 2 from 1)")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 20));
  cmd->add_flag("--diloco", p->diloco,
                "--project: also DiLoCo (H = 30, 100) and Streaming DiLoCo (P = 2, 3; H = 30; "
                "4-bit; tau = 1) at --diloco-nodes");
  cmd->add_option("--diloco-nodes", p->diloco_nodes, "--project --diloco: the replicas")
      ->capture_default_str()
      ->check(CLI::Range(2, 1 << 20));
  cmd->callback([m, p, projecting] {
    if (*projecting) {
      project(*p);
    } else {
      measure(*m);
    }
  });
}

}  // namespace nanogpt::cli
