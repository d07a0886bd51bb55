// Post-training stages (sft, dpo, rl) on several processes (posttrain/stage_ranks.hpp). Run
// under mpirun with test_distributed.cpp's main: every test is collective. Each rank also runs
// the stage alone (Comm::local()) from the same checkpoint, the single-process reference.
//
// What N ranks must give: the same rollouts as one process, bit for bit (a sample's generator
// is keyed by its index in the step, not by the rank that draws it); the single process's
// parameters up to the order of the float sums of the gradients (bounded below); rank 0's run
// directory; a run stopped and resumed on the same ranks bitwise the uninterrupted one. (Every
// rank holds the same parameters after a step by the optimizer's construction: each shard's
// update is gathered from its owner, as test_distributed.cpp checks.)
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <memory>

#include "model/model_io.hpp"
#include "posttrain/dpo.hpp"
#include "posttrain/rl.hpp"
#include "posttrain/sft.hpp"
#include "runtime/comm.hpp"
#include "runtime/file_io.hpp"
#include "support/chat_checkpoint.hpp"
#include "support/fixtures.hpp"

namespace nanogpt {
namespace {

// Rank 0's micro chat checkpoint, its paths known to every rank (one filesystem), and a
// directory of each rank's own for its single-process reference runs.
struct SharedCheckpoint {
  std::unique_ptr<MicroChatCheckpoint> own;  // rank 0's
  TempDir local;                             // this rank's
  std::string dir, checkpoint, tokenizer;
  nlohmann::json tokenizer_record;

  SharedCheckpoint() {
    Comm& w = Comm::world();
    std::string mine;
    if (w.is_root()) {
      // fp32, so the ranks' different gradient sums stay at fp32's rounding (bf16 products would
      // round them to 8 bits again at every layer of every later step).
      own = std::make_unique<MicroChatCheckpoint>(true, PrecisionSetting::kFp32);
      mine = own->dir.path() + "\n" + own->checkpoint + "\n" + own->tokenizer;
    }
    const std::string all = w.allgather_strings(mine, "shared checkpoint")[0];
    const size_t a = all.find('\n'), b = all.find('\n', a + 1);
    dir = all.substr(0, a);
    checkpoint = all.substr(a + 1, b - a - 1);
    tokenizer = all.substr(b + 1);
    tokenizer_record = {{"spec", tokenizer}};
  }
  // A stage's options start from the checkpoint, its tokenizer and what it records of it.
  template <class StageOptions>
  void start(StageOptions& o) const {
    o.checkpoint = checkpoint;
    o.tokenizer = tokenizer;
    o.tokenizer_record = tokenizer_record;
  }
  // Every rank is done with rank 0's files before they are removed.
  ~SharedCheckpoint() { Comm::world().barrier("shared checkpoint done"); }
  SharedCheckpoint(const SharedCheckpoint&) = delete;
  SharedCheckpoint& operator=(const SharedCheckpoint&) = delete;
};

// max |a - b| over the parameters, relative to max |a|.
double relative_difference(const Gpt& a, const Gpt& b) {
  double diff = 0, scale = 0;
  const auto& va = a.params().values();
  const auto& vb = b.params().values();
  for (size_t i = 0; i < va.size(); ++i) {
    diff = std::max(diff, static_cast<double>(std::fabs(va[i] - vb[i])));
    scale = std::max(scale, static_cast<double>(std::fabs(va[i])));
  }
  return diff / scale;
}

// Different float sums of the same gradients: each step's update moves by a few units in the
// last place of fp32 (2^-24 ≈ 6e-8 relative), compounded over a handful of steps and through
// Newton–Schulz; 1e-4 of the largest weight is far above that and far below a step's size
// (lr 0.02–0.05 of the weights' scale), so a wrong normalisation or a missing rank's gradient
// fails it.
constexpr double kRankSumTolerance = 1e-4;

// Only rank 0 writes: the run directory exists on the shared filesystem and the others never
// created one of their own elsewhere (they were given the same path).
void expect_written_once(const std::string& run_dir) {
  EXPECT_TRUE(std::filesystem::exists(run_dir + "/run.json"));
  EXPECT_TRUE(std::filesystem::exists(run_dir + "/metrics.jsonl"));
}

TEST(PosttrainRanks, SftEqualsOneProcessAndResumesBitwise) {
  const SharedCheckpoint f;
  Comm& w = Comm::world();
  SftOptions o;
  f.start(o);
  o.data = f.dir + "/chat.jsonl";  // one file every rank reads, as in a real job
  if (w.is_root()) write_conversations(o.data, 40);
  w.barrier("data written");
  o.epochs = 2;
  o.rows_per_step = 3;  // not a multiple of 2: a rank's slice may be one row or two
  o.lr_scale = 1.0;
  o.live_line = false;
  o.evaluate = false;

  SftOptions alone = o;
  alone.comm = &Comm::local();
  alone.run_dir = f.local.path() + "/alone";
  const SftResult one = run_sft(alone);

  SftOptions ranks = o;
  ranks.run_dir = f.dir + "/sft-ranks";
  const SftResult many = run_sft(ranks);
  ASSERT_EQ(many.steps_run, one.steps_run);
  EXPECT_NEAR(many.last_loss, one.last_loss, 1e-4 * std::fabs(one.last_loss));
  w.barrier("sft written");
  expect_written_once(ranks.run_dir);
  const std::unique_ptr<Gpt> a = load_model(one.last_checkpoint),
                             b = load_model(many.last_checkpoint);
  EXPECT_LT(relative_difference(*a, *b), kRankSumTolerance);
  EXPECT_GT(relative_difference(*a, *load_model(f.checkpoint)), 100 * kRankSumTolerance)
      << "the run did not move the weights: the comparison above would prove nothing";

  // Stopped after two steps and resumed on the same ranks: the same bits.
  SftOptions part = ranks;
  part.run_dir = f.dir + "/sft-part";
  part.max_steps = 2;
  run_sft(part);
  part.max_steps = 0;
  part.resume = true;
  const SftResult resumed = run_sft(part);
  w.barrier("sft resumed");
  EXPECT_EQ(model_bytes(resumed.last_checkpoint), model_bytes(many.last_checkpoint));
}

TEST(PosttrainRanks, DpoEqualsOneProcess) {
  const SharedCheckpoint f;
  Comm& w = Comm::world();
  DpoOptions o;
  f.start(o);
  o.pairs = f.dir + "/pairs.jsonl";
  if (w.is_root()) write_pairs(o.pairs, 20);
  w.barrier("pairs written");
  o.epochs = 2;
  o.pairs_per_step = 7;  // the last step of an epoch has 6 pairs
  o.lr_scale = 1.0;

  DpoOptions alone = o;
  alone.comm = &Comm::local();
  alone.run_dir = f.local.path() + "/alone";
  const DpoRunResult one = run_dpo(alone);
  DpoOptions ranks = o;
  ranks.run_dir = f.dir + "/dpo-ranks";
  const DpoRunResult many = run_dpo(ranks);
  ASSERT_EQ(many.history.size(), one.history.size());
  // The parameters are not compared: DPO's gradient is the difference of the chosen and
  // rejected replies' gradients, nearly cancelling along many directions, and Adam's division
  // by √v (like Muon's orthogonalisation) gives every direction a full-sized step, so the sign
  // of a rounding-level sum decides some weights' steps, weights the loss barely sees. The loss
  // and the rewards, which do see the update, agree.
  for (size_t i = 0; i < one.history.size(); ++i) {
    EXPECT_NEAR(many.history[i].loss, one.history[i].loss, 1e-4 * one.history[i].loss)
        << "step " << i + 1;
    EXPECT_NEAR(many.history[i].margin, one.history[i].margin, 1e-3) << "step " << i + 1;
    EXPECT_NEAR(many.history[i].accuracy, one.history[i].accuracy, 1e-12) << "step " << i + 1;
  }
  EXPECT_LT(many.history.back().loss, many.history.front().loss - 0.02);
  w.barrier("dpo written");
  expect_written_once(ranks.run_dir);
}

// A rubric gives rewards that vary within a group (a random model's replies differ in length),
// so the steps have gradients. Both steps' rollouts are the single process's: the first's are
// drawn from the same weights, the second's from weights that differ by rounding only (a
// sampled token changes only if its uniform draw falls within that rounding of a boundary of
// the cumulative distribution); the losses and entropies agree. The parameters are not
// compared, for the reason DpoEqualsOneProcess gives: here the zero-initialised lm_head's rows
// of tokens never sampled get a gradient that nearly cancels, and Adam's first step moves each
// by ±lr whatever its size, so the sign of a rounding-level sum decides it.
void rl_equals_one_process(AdvantageEstimator estimator, const std::string& name,
                           bool whiten = false) {
  const SharedCheckpoint f;
  Comm& w = Comm::world();
  RlOptions o;
  f.start(o);
  o.rubric = "builtin:fortune-answers";
  // Two steps: the second's rollouts are drawn from the weights the first update made on N
  // ranks and on one. Later steps drift apart (a weight Adam or Muon moved by a full step on a
  // rounding-level gradient, below, changes a logit enough to move a draw across a boundary).
  o.steps = 2;
  o.prompts_per_step = 3;  // one or two prompts per rank on 2 ranks, one each on 3
  o.group_size = 4;
  o.max_tokens = 8;
  o.estimator = estimator;
  o.whiten_advantages = whiten;
  o.lr_scale = 1.0;
  o.evaluate = false;
  o.live_line = false;

  RlOptions alone = o;
  alone.comm = &Comm::local();
  alone.run_dir = f.local.path() + "/alone";
  const RlResult one = run_rl(alone);
  RlOptions ranks = o;
  ranks.run_dir = f.dir + "/rl-ranks-" + name;
  const RlResult many = run_rl(ranks);
  ASSERT_EQ(many.steps.size(), one.steps.size());
  for (size_t i = 0; i < one.steps.size(); ++i) {
    const RlStepMetrics &m = many.steps[i], &s = one.steps[i];
    EXPECT_NEAR(m.mean_reward, s.mean_reward, 1e-12) << "step " << i + 1;  // sums' order
    EXPECT_EQ(m.mean_length, s.mean_length) << "step " << i + 1;
    EXPECT_EQ(m.uniform_groups, s.uniform_groups) << "step " << i + 1;
    EXPECT_NEAR(m.loss, s.loss, 1e-6) << "step " << i + 1;
    EXPECT_NEAR(m.entropy, s.entropy, 1e-5 * s.entropy) << "step " << i + 1;
    if (estimator == AdvantageEstimator::kPpoGae) {
      EXPECT_NEAR(m.value_loss, s.value_loss, 1e-6) << "step " << i + 1;
      if (std::isfinite(s.explained_variance)) {
        EXPECT_NEAR(m.explained_variance, s.explained_variance, 1e-6) << "step " << i + 1;
      }
    }
  }
  w.barrier("rl written");
  expect_written_once(ranks.run_dir);
  EXPECT_GT(relative_difference(*load_model(one.last_checkpoint), *load_model(f.checkpoint)), 1e-3)
      << "no step had a gradient: the comparisons above would prove little";
}

TEST(PosttrainRanks, RlGrpoEqualsOneProcess) {
  rl_equals_one_process(AdvantageEstimator::kGrpo, "grpo");
}

// reinforce_ema's baseline moves by the mean of every rank's rewards.
TEST(PosttrainRanks, RlReinforceEmaEqualsOneProcess) {
  rl_equals_one_process(AdvantageEstimator::kReinforceEma, "ema");
}

// PPO: the value head's gradient summed over the ranks, the value loss over the whole step's
// tokens, and whitening's and explained variance's moments over every rank's tokens.
TEST(PosttrainRanks, RlPpoEqualsOneProcess) {
  rl_equals_one_process(AdvantageEstimator::kPpoGae, "ppo", /*whiten=*/true);
}

TEST(PosttrainRanks, RlRefusesFewerPromptsThanRanks) {
  const SharedCheckpoint f;
  Comm& w = Comm::world();
  RlOptions o;
  f.start(o);
  o.rubric = "builtin:fortune-answers";
  o.prompts_per_step = w.size() - 1;
  o.run_dir = f.dir + "/never";
  EXPECT_THROW(run_rl(o), InputError);
  w.barrier("refused");
  EXPECT_FALSE(std::filesystem::exists(o.run_dir));
}

}  // namespace
}  // namespace nanogpt
