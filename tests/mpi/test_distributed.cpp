// Data-parallel training on several processes. Run under mpirun (ctest does: 2 and 3 ranks,
// shared memory and TCP); every test is collective, so every rank runs every test. The
// single-process reference each test compares against runs on every rank too, on
// Comm::local().
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <numeric>

#include "optim/gpt_optimizer.hpp"
#include "optim/outer_grad_codec.hpp"
#include "optim/streaming_diloco.hpp"
#include "runtime/comm.hpp"
#include "runtime/random.hpp"
#include "support/fixtures.hpp"
#include "support/model.hpp"
#include "train/evaluate.hpp"
#include "train/replica_comms.hpp"
#include "train/train_step.hpp"

namespace nanogpt {
namespace {

Comm& world() {
  return Comm::world();
}

std::vector<float> random_floats(size_t n, uint64_t seed) {
  Rng rng(seed);
  std::vector<float> v(n);
  for (float& x : v) x = static_cast<float>(rng.normal());
  return v;
}

class ProgressModes : public ::testing::TestWithParam<CommProgress> {
 protected:
  void SetUp() override { world().set_progress_mode(GetParam()); }
  void TearDown() override { world().set_progress_mode(CommProgress::kThread); }
};

// Each collective against a reference every rank can compute (it knows every rank's seed).
// The sum of N floats rounds N - 1 times: |error| <= (N - 1)·u·Σ|x_r| with u = 2^-24.
TEST_P(ProgressModes, CollectivesMatchAReferenceOnRandomData) {
  Comm& c = world();
  const int N = c.size(), me = c.rank();
  ASSERT_GT(N, 1) << "run under mpirun with at least 2 ranks";
  const size_t n = 1037;
  std::vector<float> mine = random_floats(n, 100 + static_cast<uint64_t>(me));
  std::vector<double> ref(n, 0.0), abs_sum(n, 0.0);
  for (int r = 0; r < N; ++r) {
    const std::vector<float> x = random_floats(n, 100 + static_cast<uint64_t>(r));
    for (size_t i = 0; i < n; ++i) {
      ref[i] += x[i];
      abs_sum[i] += std::fabs(x[i]);
    }
  }
  // Several operations in flight at once, waited for in reverse order.
  std::vector<float> reduced = mine;
  std::vector<int> counts(static_cast<size_t>(N));
  for (int r = 0; r < N; ++r) counts[static_cast<size_t>(r)] = 5 + 3 * r;  // uneven
  const int total = std::accumulate(counts.begin(), counts.end(), 0);
  std::vector<float> scatter_in = random_floats(static_cast<size_t>(total), 200 + me);
  std::vector<float> scatter_out(static_cast<size_t>(counts[static_cast<size_t>(me)]));
  std::vector<float> gather_in = random_floats(static_cast<size_t>(counts[static_cast<size_t>(me)]),
                                               300 + static_cast<uint64_t>(me));
  std::vector<float> gather_out(static_cast<size_t>(total));
  std::vector<float> bcast = random_floats(64, 400 + static_cast<uint64_t>(me));
  const Comm::OpId a = c.start_allreduce_sum(reduced, "test allreduce");
  const Comm::OpId b = c.start_reduce_scatter_sum(scatter_in, scatter_out, counts, "test rs");
  const Comm::OpId g = c.start_allgather(gather_in, gather_out, counts, "test allgather");
  const Comm::OpId d = c.start_broadcast(
      std::span<std::byte>(reinterpret_cast<std::byte*>(bcast.data()), bcast.size() * 4), N - 1,
      "test broadcast");
  c.wait(d);
  c.wait(g);
  c.wait(b);
  c.wait(a);
  for (size_t i = 0; i < n; ++i) {
    EXPECT_LE(std::fabs(reduced[i] - ref[i]), (N - 1) * std::ldexp(1.0, -24) * abs_sum[i] + 1e-30)
        << i;
  }
  int begin = 0;
  for (int r = 0; r < me; ++r) begin += counts[static_cast<size_t>(r)];
  for (int k = 0; k < counts[static_cast<size_t>(me)]; ++k) {
    double want = 0, mag = 0;
    for (int r = 0; r < N; ++r) {
      const float x =
          random_floats(static_cast<size_t>(total), 200 + r)[static_cast<size_t>(begin + k)];
      want += x;
      mag += std::fabs(x);
    }
    EXPECT_LE(std::fabs(scatter_out[static_cast<size_t>(k)] - want),
              (N - 1) * std::ldexp(1.0, -24) * mag + 1e-30);
  }
  for (int r = 0, at = 0; r < N; at += counts[static_cast<size_t>(r)], ++r) {
    const std::vector<float> x =
        random_floats(static_cast<size_t>(counts[static_cast<size_t>(r)]), 300 + r);
    for (size_t k = 0; k < x.size(); ++k) EXPECT_EQ(gather_out[static_cast<size_t>(at) + k], x[k]);
  }
  EXPECT_EQ(bcast, random_floats(64, 400 + static_cast<uint64_t>(N - 1)));
  EXPECT_DOUBLE_EQ(c.sum(me + 0.5, "test sum"), N * (N - 1) / 2.0 + 0.5 * N);
  EXPECT_EQ(c.max(me * 10, "test max"), (N - 1) * 10);
  const std::vector<std::string> names =
      c.allgather_strings(std::string(static_cast<size_t>(me), 'x'), "t");
  for (int r = 0; r < N; ++r)
    EXPECT_EQ(names[static_cast<size_t>(r)].size(), static_cast<size_t>(r));
}

INSTANTIATE_TEST_SUITE_P(Comm, ProgressModes,
                         ::testing::Values(CommProgress::kThread, CommProgress::kPoll),
                         [](const auto& param_info) {
                           return param_info.param == CommProgress::kThread ? "thread" : "poll";
                         });

// A micro model whose global batch (6 sequences) splits evenly over 1, 2 or 3 ranks, with two
// passes per rank at 2 ranks (micro_batch_tokens), so accumulation and the reduction's overlap
// with the last pass both run.
Config dp_config(PrecisionSetting precision) {
  Config c = micro_config();
  c.precision = precision;
  c.tokens_per_step = 6 * c.train_seq_len;
  c.micro_batch_tokens = 2 * c.train_seq_len;
  c.num_iterations = 20;
  c.bucket_mb = 0.01;  // many buckets for a micro model
  return c;
}

struct Trained {
  std::vector<double> losses;
  std::vector<float> params;
  std::vector<GptOptimizer::StateTensor> state;
};

Trained train_steps(const Config& c, Comm& comm, int steps) {
  Gpt model(c);
  model.init_parameters(static_cast<uint64_t>(c.seed));
  GptOptimizer opt(model.params(), c, model.precision(), comm, model.gradient_ready_stages());
  const auto B = static_cast<size_t>(c.tokens_per_step);
  const std::vector<uint32_t> stream = synthetic_tokens(static_cast<size_t>(steps) * B + 1, 3);
  const size_t local = B / static_cast<size_t>(comm.size());
  const size_t first = local * static_cast<size_t>(comm.rank());
  Trained t;
  std::vector<int32_t> in(local), tgt(local);
  for (int s = 0; s < steps; ++s) {
    for (size_t i = 0; i < local; ++i) {
      in[i] = static_cast<int32_t>(stream[s * B + first + i]);
      tgt[i] = static_cast<int32_t>(stream[s * B + first + i + 1]);
    }
    t.losses.push_back(run_train_step(model, opt, in, tgt, s, 2));
  }
  t.params.assign(model.params().values().begin(), model.params().values().end());
  t.state = opt.export_state();
  return t;
}

size_t differing_bits(std::span<const float> a, std::span<const float> b) {
  size_t n = 0;
  for (size_t i = 0; i < a.size(); ++i) n += std::memcmp(&a[i], &b[i], sizeof(float)) != 0;
  return n;
}

// Same global batches, same seed: N ranks' losses equal one process's up to summation order
// (the gradient is summed over ranks instead of accumulated pass by pass, and the loss over
// ranks). Measured at 2 and 3 ranks over 20 steps (AMD EPYC Zen 5): fp32 within 1e-6
// relative, bf16 within 2e-5 (a weight that differs in its last fp32 bit can round to another
// bf16 operand). The bounds are 10x that.
void expect_losses_match(PrecisionSetting precision, double bound) {
  const Config c = dp_config(precision);
  const Trained dist = train_steps(c, world(), 20);
  const Trained one = train_steps(c, Comm::local(), 20);
  double worst = 0;
  for (size_t s = 0; s < dist.losses.size(); ++s) {
    const double rel = std::fabs(dist.losses[s] - one.losses[s]) / std::fabs(one.losses[s]);
    worst = std::max(worst, rel);
    EXPECT_LE(rel, bound) << "step " << s + 1 << ": " << dist.losses[s] << " vs " << one.losses[s];
  }
  if (world().is_root()) {
    std::printf(
        "[ ranks %d, %s ] worst relative loss difference over 20 steps: %.3g (bound %.3g)\n",
        world().size(), precision == PrecisionSetting::kFp32 ? "fp32" : "bf16", worst, bound);
  }
  EXPECT_LT(dist.losses.back(), dist.losses.front() - 0.5) << "the model should learn";
}

TEST(DataParallel, LossesEqualOneProcessInFp32) {
  expect_losses_match(PrecisionSetting::kFp32, 1e-5);
}

TEST(DataParallel, LossesEqualOneProcessInBf16) {
  expect_losses_match(PrecisionSetting::kBf16, 2e-4);
}

TEST(DataParallel, TwoRunsOnTheSameRanksAreBitwiseIdentical) {
  const Config c = dp_config(PrecisionSetting::kBf16);
  const Trained a = train_steps(c, world(), 6);
  const Trained b = train_steps(c, world(), 6);
  EXPECT_EQ(a.losses, b.losses);
  EXPECT_EQ(differing_bits(a.params, b.params), 0u);
}

TEST(DataParallel, ProgressByPollingGivesTheSameBitsAsTheThread) {
  Config c = dp_config(PrecisionSetting::kFp32);
  world().set_progress_mode(CommProgress::kPoll);
  const Trained polled = train_steps(c, world(), 4);
  world().set_progress_mode(CommProgress::kThread);
  const Trained threaded = train_steps(c, world(), 4);
  EXPECT_EQ(polled.losses, threaded.losses);
  EXPECT_EQ(differing_bits(polled.params, threaded.params), 0u);
}

// Given the same summed gradient on every rank, the sharded step (Muon on owners, Adam on
// slices, parameters gathered) is bitwise the single-process step, momentum included.
void expect_sharded_step_is_the_single_process_step(const Config& c) {
  Gpt model(c);
  randomize(model, 11);
  ParameterSet dist_params = model.params(), one_params = model.params();
  GptOptimizer dist(dist_params, c, model.precision(), world(), model.gradient_ready_stages());
  GptOptimizer one(one_params, c, model.precision());
  for (int step = 0; step < 3; ++step) {
    std::vector<float> grads =
        random_floats(model.params().size(), 50 + static_cast<uint64_t>(step));
    for (float& g : grads) g *= 0.01f;
    std::vector<float> copy = grads;
    dist.step(dist_params, grads, step);
    one.step(one_params, copy, step);
    EXPECT_EQ(differing_bits(dist_params.values(), one_params.values()), 0u) << "step " << step;
  }
  const auto a = dist.export_state(), b = one.export_state();
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i)
    EXPECT_EQ(differing_bits(a[i].data, b[i].data), 0u) << a[i].name;
}

TEST(DataParallel, ShardedStepIsBitwiseTheSingleProcessStep) {
  expect_sharded_step_is_the_single_process_step(dp_config(PrecisionSetting::kFp32));
}

// With matrix_optimizer adam the matrices are Adam tensors, sliced over the ranks like the
// others; with the switchable components off the model has fewer tensors and backward stages.
Config everything_off(Config c) {
  c.matrix_optimizer = MatrixOptimizer::kAdam;
  c.value_embeddings = c.unet_skips = c.x0_mixing = c.window_warmup = false;
  return c;
}

TEST(DataParallel, AdamMatricesShardedStepIsBitwiseTheSingleProcessStep) {
  expect_sharded_step_is_the_single_process_step(
      everything_off(dp_config(PrecisionSetting::kFp32)));
}

TEST(DataParallel, SwitchedOffComponentsTrainAsOneProcess) {
  const Config c = everything_off(dp_config(PrecisionSetting::kFp32));
  const Trained dist = train_steps(c, world(), 6);
  const Trained one = train_steps(c, Comm::local(), 6);
  for (size_t s = 0; s < dist.losses.size(); ++s) {
    EXPECT_NEAR(dist.losses[s], one.losses[s], 1e-5 * std::fabs(one.losses[s])) << "step " << s;
  }
}

// Optimizer state gathered from N ranks loads into one process and back, unchanged: the same
// checkpoint files serve any number of ranks. Each rank keeps only its share: Adam's moments
// 1/N of the elements, Muon's momentum that of its matrices.
TEST(DataParallel, OptimizerStateMovesBetweenWorldSizesAndShrinksPerRank) {
  const Config c = dp_config(PrecisionSetting::kFp32);
  const Trained dist = train_steps(c, world(), 3);
  Gpt model(c);
  GptOptimizer one(model.params(), c, model.precision());
  one.import_state(dist.state);
  const auto back = one.export_state();
  GptOptimizer again(model.params(), c, model.precision(), world(), model.gradient_ready_stages());
  again.import_state(back);
  const auto round_trip = again.export_state();
  ASSERT_EQ(round_trip.size(), dist.state.size());
  for (size_t i = 0; i < dist.state.size(); ++i) {
    EXPECT_EQ(differing_bits(back[i].data, dist.state[i].data), 0u) << dist.state[i].name;
    EXPECT_EQ(differing_bits(round_trip[i].data, dist.state[i].data), 0u) << dist.state[i].name;
  }
  // Memory: this rank's state is its share, within one matrix of 1/N of the whole.
  const double whole = static_cast<double>(one.state_bytes());
  const double mine = static_cast<double>(again.state_bytes());
  const double total = world().sum(mine, "state bytes");
  EXPECT_DOUBLE_EQ(total, whole);
  size_t largest_matrix = 0;
  for (const ParamTensor& t : model.params().tensors()) {
    if (t.group == ParamGroup::kMatrix) largest_matrix = std::max(largest_matrix, t.numel);
  }
  EXPECT_LE(mine, whole / world().size() + 4.0 * static_cast<double>(largest_matrix) + 64);
  if (world().is_root()) {
    std::printf("[ ranks %d ] optimizer state per rank: %.0f bytes of %.0f (%.2f of 1/N)\n",
                world().size(), mine, whole, mine / (whole / world().size()));
  }
}

TEST(DataParallel, ValidationOnRanksEqualsOneProcess) {
  Config c = dp_config(PrecisionSetting::kFp32);
  // One directory for all ranks: rank 0 writes the shards, the others wait for it.
  const std::string dir = std::filesystem::temp_directory_path().string() + "/nanogpt-mpi-eval-" +
                          std::to_string(static_cast<long long>(world().max(::getpid(), "pid")));
  if (world().is_root()) {
    std::filesystem::create_directories(dir);
    write_synthetic_shards(dir);
  }
  world().barrier("shards written");
  Gpt model(c);
  randomize(model, 4);
  const int64_t tokens = 7 * c.val_seq_len;  // uneven over 2 and 3 ranks
  const EvalResult dist = evaluate(model, dir + "/val_*.bin", tokens, c.val_seq_len, 2, world());
  const EvalResult one = evaluate(model, dir + "/val_*.bin", tokens, c.val_seq_len, 2);
  EXPECT_NEAR(dist.loss, one.loss, 1e-12 * std::fabs(one.loss));
  world().barrier("evaluated");
  if (world().is_root()) std::filesystem::remove_all(dir);
}

// ---- DiLoCo and Streaming DiLoCo -------------------------------------------------------------

// Batch `step` of the synthetic stream: global batch B, rank `part` of `parts` takes its slice.
void slice_batch(const std::vector<uint32_t>& stream, size_t B, int step, int part, int parts,
                 std::vector<int32_t>& in, std::vector<int32_t>& tgt) {
  const size_t local = B / static_cast<size_t>(parts);
  const size_t first = static_cast<size_t>(step) * B + local * static_cast<size_t>(part);
  in.resize(local);
  tgt.resize(local);
  for (size_t i = 0; i < local; ++i) {
    in[i] = static_cast<int32_t>(stream[first + i]);
    tgt[i] = static_cast<int32_t>(stream[first + i + 1]);
  }
}

// What the trainer does, on the world: the ranks split into replicas, each trains its slices
// with its inner optimizer and the outer loop runs after every step. Returns this rank's
// parameters after each step.
std::vector<std::vector<float>> diloco_run(const Config& c, int steps) {
  ReplicaComms comms(world(), c);
  Gpt model(c);
  model.init_parameters(static_cast<uint64_t>(c.seed));
  GptOptimizer opt(model.params(), c, model.precision(), comms.replica(),
                   model.gradient_ready_stages());
  StreamingDiloco outer(model.params(), c, comms.replica(), *comms.across());
  const auto B = static_cast<size_t>(c.tokens_per_step);
  const std::vector<uint32_t> stream = synthetic_tokens(static_cast<size_t>(steps) * B + 1, 3);
  std::vector<int32_t> in, tgt;
  std::vector<std::vector<float>> after;
  for (int s = 0; s < steps; ++s) {
    slice_batch(stream, B, s, world().rank(), world().size(), in, tgt);
    run_train_step(model, opt, in, tgt, s, 2, comms.replicas());
    outer.after_inner_step(model.params(), s + 1);
    if (s + 1 == steps) outer.finish(model.params(), s + 1);
    after.emplace_back(model.params().values().begin(), model.params().values().end());
  }
  return after;
}

// The algorithm written as a plain loop over M replicas in one process, from the paper's
// description: every replica steps, then fragments whose delay ended merge
// θ_r ← α·θ_r + (1−α)·θ_g, then fragments due average Δ_r = θ_g − θ_r (each rounded through the
// wire format) and take the Nesterov step on θ_g; at the end, a fragment that moved since its
// last sync becomes the replicas' mean (θ_g − mean Δ) and every replica takes θ_g. Returns replica
// `which`'s parameters after each step.
std::vector<std::vector<float>> diloco_reference(const Config& c, int steps, int which) {
  const int M = world().size();  // one replica per rank
  const int64_t P = c.outer_fragments(), H = c.sync_every, tau = c.outer_sync_delay();
  const auto alpha = static_cast<float>(c.outer_merge_alpha());
  const auto lr = static_cast<float>(c.outer_lr), mu = static_cast<float>(c.outer_momentum);
  std::vector<std::unique_ptr<Gpt>> models;
  std::vector<std::unique_ptr<GptOptimizer>> opts;
  for (int r = 0; r < M; ++r) {
    models.push_back(std::make_unique<Gpt>(c));
    models.back()->init_parameters(static_cast<uint64_t>(c.seed));
    opts.push_back(
        std::make_unique<GptOptimizer>(models.back()->params(), c, models.back()->precision()));
  }
  const std::vector<OuterFragment> frags =
      plan_fragments(models[0]->params().tensors(), c.num_layers, P, c.fragment_order);
  std::vector<float> global(models[0]->params().values().begin(),
                            models[0]->params().values().end());
  std::vector<float> momentum(global.size(), 0.0f);
  std::vector<int64_t> merge_at(static_cast<size_t>(P), -1), last(static_cast<size_t>(P), 0);
  auto elements = [&](size_t p) {
    std::vector<size_t> idx;
    for (const ParamRun& run : frags[p].runs)
      for (size_t i = 0; i < run.count; ++i) idx.push_back(run.offset + i);
    return idx;
  };
  auto merge = [&](size_t p, float a) {
    for (int r = 0; r < M; ++r) {
      float* th = models[static_cast<size_t>(r)]->params().values().data();
      for (size_t i : elements(p)) th[i] = a == 0 ? global[i] : a * th[i] + (1.0f - a) * global[i];
    }
  };
  auto outer_step = [&](size_t p, bool mean_only) {
    const std::vector<size_t> idx = elements(p);
    std::vector<float> sum(idx.size(), 0.0f);
    for (int r = 0; r < M; ++r) {
      const float* th = models[static_cast<size_t>(r)]->params().values().data();
      std::vector<float> delta(idx.size());
      for (size_t k = 0; k < idx.size(); ++k) delta[k] = global[idx[k]] - th[idx[k]];
      std::vector<uint8_t> wire(outer_grad_encoded_bytes(delta.size(), c.outer_bits()));
      encode_outer_grad(delta, c.outer_bits(), wire, "reference");
      decode_add_outer_grad(wire, c.outer_bits(), sum);
    }
    for (size_t k = 0; k < idx.size(); ++k) {
      const float d = sum[k] / static_cast<float>(M);
      if (mean_only) {
        global[idx[k]] -= d;
        continue;
      }
      momentum[idx[k]] = mu * momentum[idx[k]] + d;
      global[idx[k]] -= lr * (d + mu * momentum[idx[k]]);
    }
  };
  const auto B = static_cast<size_t>(c.tokens_per_step);
  const std::vector<uint32_t> stream = synthetic_tokens(static_cast<size_t>(steps) * B + 1, 3);
  std::vector<int32_t> in, tgt;
  std::vector<std::vector<float>> after;
  for (int t = 1; t <= steps; ++t) {
    for (int r = 0; r < M; ++r) {
      slice_batch(stream, B, t - 1, r, M, in, tgt);
      run_train_step(*models[static_cast<size_t>(r)], *opts[static_cast<size_t>(r)], in, tgt, t - 1,
                     2, M);
    }
    for (size_t p = 0; p < static_cast<size_t>(P); ++p) {
      if (merge_at[p] == t) {
        merge(p, alpha);
        merge_at[p] = -1;
      }
    }
    for (size_t p = 0; p < static_cast<size_t>(P); ++p) {
      const int64_t offset = static_cast<int64_t>(p) * H / P;
      if (t < std::max<int64_t>(1, offset) || (t - offset) % H != 0) continue;
      outer_step(p, false);
      last[p] = t;
      if (tau == 0) {
        merge(p, alpha);
      } else {
        merge_at[p] = t + tau;
      }
    }
    if (t == steps) {
      for (size_t p = 0; p < static_cast<size_t>(P); ++p) {
        if (merge_at[p] >= 0) merge(p, alpha);
        if (last[p] < t) outer_step(p, true);
        merge(p, 0.0f);
      }
    }
    const auto& v = models[static_cast<size_t>(which)]->params().values();
    after.emplace_back(v.begin(), v.end());
  }
  return after;
}

Config diloco_config() {
  Config c = dp_config(PrecisionSetting::kFp32);
  c.sync = SyncMode::kDiloco;
  c.sync_every = 3;
  c.outer_grad_bits = 32;
  return c;
}

double max_abs_difference(std::span<const float> a, std::span<const float> b) {
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::fabs(double{a[i]} - double{b[i]}));
  return m;
}

void expect_matches_reference(const Config& c, int steps, const char* what) {
  const auto dist = diloco_run(c, steps);
  const auto ref = diloco_reference(c, steps, world().rank());
  ASSERT_EQ(dist.size(), ref.size());
  for (size_t s = 0; s < dist.size(); ++s) {
    EXPECT_EQ(differing_bits(dist[s], ref[s]), 0u)
        << what << ", step " << s + 1 << ": max |difference| "
        << max_abs_difference(dist[s], ref[s]);
  }
  // Every replica ends on θ_global, the same everywhere.
  std::vector<float> first = dist.back();
  std::vector<float> all(first.size() * static_cast<size_t>(world().size()));
  world().wait(world().start_allgather(
      first, all,
      std::vector<int>(static_cast<size_t>(world().size()), static_cast<int>(first.size())),
      "final parameters"));
  for (int r = 1; r < world().size(); ++r) {
    EXPECT_EQ(differing_bits(std::span<const float>(all).subspan(0, first.size()),
                             std::span<const float>(all).subspan(r * first.size(), first.size())),
              0u)
        << what << ": replica " << r << " ends elsewhere than replica 0";
  }
}

// DiLoCo (P = 1, τ = 0, float32 outer gradients) against the plain loop, over 8 steps with an
// outer step every 3 (and a final one for the 2 steps after the last).
TEST(Diloco, OuterStepMatchesAPlainLoopReference) {
  expect_matches_reference(diloco_config(), 8, "diloco");
}

// Streaming: 2 fragments (strided) leaving 2 steps apart, applied a step later with α = 0.5,
// 4-bit outer gradients; the parameters match the reference schedule after every step.
TEST(Diloco, StreamingMatchesItsReferenceScheduleStepByStep) {
  Config c = diloco_config();
  c.sync = SyncMode::kStreamingDiloco;
  c.fragments = 2;
  c.sync_every = 4;
  c.outer_grad_bits = 4;
  ASSERT_EQ(c.outer_sync_delay(), 1);
  ASSERT_EQ(c.outer_merge_alpha(), 0.5);
  expect_matches_reference(c, 10, "streaming 4-bit");
  c.fragments = 3;
  c.sync_every = 6;
  c.fragment_order = FragmentOrder::kSequential;
  c.outer_grad_bits = 8;
  c.sync_delay = 0;
  expect_matches_reference(c, 8, "streaming sequential 8-bit, no delay");
}

// One replica of all the ranks, an outer step after every inner step with lr 1 and no momentum:
// θ_global − 1·(θ_global − θ_local) is θ_local (exactly, unless the subtraction rounds), so the
// run is the data-parallel trainer's.
TEST(Diloco, OneReplicaWithUnitOuterStepEqualsDataParallel) {
  Config c = diloco_config();
  c.replicas = 1;
  c.sync_every = 1;
  c.outer_lr = 1;
  c.outer_momentum = 0;
  const int steps = 6;
  const auto dist = diloco_run(c, steps);
  Config ddp = dp_config(PrecisionSetting::kFp32);
  const Trained plain = train_steps(ddp, world(), steps);
  const double diff = max_abs_difference(dist.back(), plain.params);
  EXPECT_LE(diff, 1e-6) << "DiLoCo(M=1, H=1, lr=1, mu=0) vs data-parallel";
  if (world().is_root()) {
    std::printf(
        "[ ranks %d ] DiLoCo M=1 vs data-parallel after %d steps: %zu parameters differ, "
        "max |difference| %.3g\n",
        world().size(), steps, differing_bits(dist.back(), plain.params), diff);
  }
}

TEST(Diloco, ReplicasMustDivideTheRanks) {
  Config c = diloco_config();
  c.replicas = world().size() + 1;
  EXPECT_THROW(ReplicaComms(world(), c), InputError);
}

}  // namespace
}  // namespace nanogpt

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  nanogpt::Comm::world();  // joins the job (mpirun) before any test
  const int failed = RUN_ALL_TESTS();
  // Every rank learns whether any failed, so the job's exit code says so.
  const int64_t any = nanogpt::Comm::world().max(failed, "test result");
  nanogpt::Comm::shutdown();
  return any != 0 ? 1 : 0;
}
