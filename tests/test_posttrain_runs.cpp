// Post-training runs end to end on a micro model (posttrain/sft.hpp, posttrain/rl.hpp): they
// learn, checkpoint, resume bitwise, do not depend on the thread count, and refuse bad input
// before writing anything.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>

#include "data/chat_format.hpp"
#include "model/model_io.hpp"
#include "posttrain/dpo.hpp"
#include "posttrain/preference_pairs.hpp"
#include "posttrain/rl.hpp"
#include "posttrain/sequence_batch.hpp"
#include "posttrain/sft.hpp"
#include "posttrain/value_head.hpp"
#include "runtime/checkpoint.hpp"
#include "runtime/error.hpp"
#include "runtime/file_io.hpp"
#include "runtime/thread_pool.hpp"
#include "support/chat_checkpoint.hpp"
#include "support/fixtures.hpp"
#include "support/input_error.hpp"
#include "support/model.hpp"

namespace nanogpt {
namespace {

using Fixture = MicroChatCheckpoint;

SftOptions sft_options(const Fixture& f, const std::string& out) {
  SftOptions o;
  o.checkpoint = f.checkpoint;
  o.tokenizer = f.tokenizer;
  o.tokenizer_record = f.tokenizer_record;
  o.data = write_conversations(f.dir.path() + "/chat.jsonl", 64);
  o.run_dir = out;
  o.epochs = 6;
  o.rows_per_step = 2;
  o.lr_scale = 1.0;
  o.live_line = false;
  return o;
}

TEST(PosttrainSft, LearnsTheAssistantTokensAndCheckpointsAsAnyRun) {
  Fixture f;
  SftOptions o = sft_options(f, f.dir.path() + "/sft");
  o.epochs = 20;
  const SftResult r = run_sft(o);
  EXPECT_EQ(r.steps_run, r.steps);
  EXPECT_EQ(r.conversations, 64);
  const auto metrics = read_file(o.run_dir + "/metrics.jsonl");
  std::vector<double> losses;
  size_t at = 0;
  while (at < metrics.size()) {
    const size_t nl = metrics.find('\n', at);
    const auto j = nlohmann::json::parse(metrics.substr(at, nl - at));
    if (j.contains("loss")) losses.push_back(j["loss"].get<double>());
    at = nl + 1;
  }
  ASSERT_EQ(static_cast<int64_t>(losses.size()), r.steps);
  // From ln(300) ≈ 5.7 (a zero head) to a fraction of it: the replies are learnt.
  EXPECT_LT(losses.back(), 0.35 * losses.front()) << losses.front() << " -> " << losses.back();
  std::printf("[   info   ] sft loss %.3f -> %.3f over %lld steps\n", losses.front(), losses.back(),
              static_cast<long long>(r.steps));
  // An ordinary checkpoint: loads as a model, records the tokenizer and the stage.
  const std::unique_ptr<Gpt> model = load_model(r.last_checkpoint);
  EXPECT_EQ(model->config().vocab_size, 300);
  const auto meta = nlohmann::json::parse(read_file(r.last_checkpoint + "/meta.json"));
  EXPECT_EQ(meta["stage"], "sft");
  EXPECT_EQ(meta["tokenizer"]["spec"], f.tokenizer);
  const auto run = nlohmann::json::parse(read_file(o.run_dir + "/run.json"));
  EXPECT_EQ(run["conversations"], 64);
  // The run drew its curves: the loss panel has a line, the pass@1 panel (no task mixture, so
  // no evaluation) says it has no points.
  const std::string svg = read_file(o.run_dir + "/curves.svg");
  EXPECT_NE(svg.find("<polyline"), std::string::npos);
  EXPECT_NE(svg.find("held-out pass@1 (no points)"), std::string::npos);
}

TEST(PosttrainSft, ResumeAndThreadCountGiveTheSameBits) {
  Fixture f;
  SftOptions whole = sft_options(f, f.dir.path() + "/whole");
  whole.epochs = 2;
  const SftResult a = run_sft(whole);
  ASSERT_GE(a.steps, 4);
  // Stopped after 3 steps, resumed to the end, on one thread.
  SftOptions part = sft_options(f, f.dir.path() + "/part");
  part.epochs = 2;
  part.max_steps = 3;
  ThreadPool one(1);
  const ThreadPool::Use use(one);
  const SftResult b1 = run_sft(part);
  EXPECT_EQ(b1.steps_run, 3);
  part.max_steps = 0;
  part.resume = true;
  const SftResult b2 = run_sft(part);
  EXPECT_EQ(b2.steps_run, a.steps - 3);
  EXPECT_EQ(model_bytes(a.last_checkpoint), model_bytes(b2.last_checkpoint));
  EXPECT_EQ(read_file(a.last_checkpoint + "/optimizer.safetensors"),
            read_file(b2.last_checkpoint + "/optimizer.safetensors"));
}

TEST(PosttrainSft, RefusesBadInputBeforeWritingAnything) {
  Fixture plain(false);  // a tokenizer without the chat tokens
  SftOptions o = sft_options(plain, plain.dir.path() + "/never");
  try {
    run_sft(o);
    FAIL() << "a tokenizer without chat tokens";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("<|user_start|>"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(std::filesystem::exists(o.run_dir));

  Fixture f;
  o = sft_options(f, f.dir.path() + "/never");
  // A conversation longer than a row (128 + 1 tokens).
  write_file_atomic(o.data, "{\"messages\": [{\"role\": \"user\", \"content\": \"" +
                                std::string(400, 'x') +
                                "\"}, {\"role\": \"assistant\", \"content\": \"y\"}]}\n");
  EXPECT_THROW(run_sft(o), InputError);
  // A bad role, named with its line.
  write_file_atomic(o.data, "{\"messages\": [{\"role\": \"robot\", \"content\": \"hi\"}]}\n");
  try {
    run_sft(o);
    FAIL() << "a bad role";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("chat.jsonl:1"), std::string::npos) << e.what();
  }
  o.data.clear();
  o.tasks = "addition:99";
  EXPECT_THROW(run_sft(o), InputError);
  o.tasks = " , ";
  EXPECT_THROW(run_sft(o), InputError);
  EXPECT_FALSE(std::filesystem::exists(o.run_dir));
}

RlOptions rl_options(const Fixture& f, const std::string& out) {
  RlOptions o;
  o.checkpoint = f.checkpoint;
  o.tokenizer = f.tokenizer;
  o.tokenizer_record = f.tokenizer_record;
  o.tasks = "addition:1,reverse:1";
  o.run_dir = out;
  o.steps = 3;
  o.prompts_per_step = 3;
  o.group_size = 4;
  o.max_tokens = 6;
  o.eval_every = 0;
  o.eval.problems_per_cell = 4;
  o.live_line = false;
  return o;
}

// The run of `o` on one thread, stopped (with its checkpoint) after its first step and resumed
// to the end: what the resumed invocation returns.
RlResult run_rl_one_thread_stopped_and_resumed(RlOptions o) {
  ThreadPool one(1);
  const ThreadPool::Use use(one);
  o.max_steps = 1;
  run_rl(o);
  o.max_steps = 0;
  o.resume = true;
  return run_rl(o);
}

TEST(PosttrainRl, StepsAreDeterministicForAnyThreadCountAndResumeBitwise) {
  Fixture f;
  const RlOptions o = rl_options(f, f.dir.path() + "/rl");
  const RlResult a = run_rl(o);
  ASSERT_EQ(a.steps_run, 3);
  for (const RlStepMetrics& m : a.steps) {
    EXPECT_GE(m.mean_reward, 0.0);
    EXPECT_LE(m.mean_reward, 1.0);
    EXPECT_GT(m.mean_length, 0.0);
    EXPECT_LE(m.mean_length, 7.0);  // max_tokens + the <|endoftext|> a sample may end with
    EXPECT_GT(m.entropy, 0.0);
    EXPECT_EQ(m.mean_ratio, 1.0);  // one update per batch: the ratio is exactly 1
    EXPECT_GE(m.uniform_groups, 0);
  }
  EXPECT_TRUE(a.evaluated);
  // A random policy solves nothing: every group's rewards agree, so no step has a gradient and
  // the weights come out exactly as they went in (no hidden term moves them).
  int64_t uniform = 0;
  for (const RlStepMetrics& m : a.steps) uniform += m.uniform_groups;
  if (uniform == 9) {
    const std::unique_ptr<Gpt> before = load_model(f.checkpoint),
                               after = load_model(a.last_checkpoint);
    EXPECT_TRUE(std::equal(before->params().values().begin(), before->params().values().end(),
                           after->params().values().begin()));
  }
  // One thread, stopped after a step and resumed: the same bits.
  const RlResult b = run_rl_one_thread_stopped_and_resumed(rl_options(f, f.dir.path() + "/part"));
  EXPECT_EQ(b.steps_run, 2);
  EXPECT_EQ(model_bytes(a.last_checkpoint), model_bytes(b.last_checkpoint));
  for (size_t i = 0; i < b.steps.size(); ++i) {
    EXPECT_EQ(b.steps[i].mean_reward, a.steps[i + 1].mean_reward);
    EXPECT_EQ(b.steps[i].mean_length, a.steps[i + 1].mean_length);
  }
}

// Rewards from a rubric: the built-in fortune rubric's prompts in turn, each completion scored
// by its weighted criteria; each criterion's rate over every prompt before and after.
TEST(PosttrainRl, RubricRewardsAndCriterionRatesBeforeAndAfter) {
  Fixture f;
  RlOptions o = rl_options(f, f.dir.path() + "/rubric");
  o.tasks.clear();
  o.rubric = "builtin:fortune-answers";
  o.steps = 2;
  o.eval.samples = 2;
  const RlResult r = run_rl(o);
  ASSERT_EQ(r.steps_run, 2);
  for (const RlStepMetrics& m : r.steps) {
    EXPECT_GE(m.mean_reward, 0.0);
    EXPECT_LE(m.mean_reward, 1.0);
  }
  const std::string table = read_file(o.run_dir + "/rubric_rates.txt");
  EXPECT_NE(table.find("rate before  rate after"), std::string::npos) << table;
  EXPECT_NE(table.find("essential"), std::string::npos) << table;
  const std::string metrics = read_file(o.run_dir + "/metrics.jsonl");
  EXPECT_NE(metrics.find("\"criteria\""), std::string::npos);
  o.tasks = "sort:1";  // both sources at once: refused
  o.run_dir = f.dir.path() + "/never";
  EXPECT_THROW(run_rl(o), InputError);
  EXPECT_FALSE(std::filesystem::exists(o.run_dir));
}

// A rubric whose only criterion is a judge's: the reward of a completion is the judge
// checkpoint's P(" Yes"), strictly inside (0, 1) for a random judge, where every other check
// gives 0 or 1. A judge criterion without --judge, a judge without a rubric and a judge that is
// not a checkpoint are refused before anything is written.
TEST(PosttrainRl, RubricJudgeCriteriaAreAnsweredByTheJudgeCheckpoint) {
  Fixture f;
  const std::string judged = f.dir.path() + "/judged.json";
  write_file_atomic(judged,
                    R"({"name": "j", "criteria": [{"name": "kind", "description": "Is it kind?",
    "class": "essential", "check": {"type": "judge"}}], "prompts": [{"name": "p", "prompt": "hi"},
    {"name": "q", "prompt": "a fortune"}]})");
  RlOptions o = rl_options(f, f.dir.path() + "/never");
  o.tasks.clear();
  o.rubric = judged;
  o.steps = 2;
  o.prompts_per_step = 2;
  o.eval.samples = 2;
  EXPECT_THROW(run_rl(o), InputError);  // no judge
  o.judge = f.dir.path() + "/no-such-checkpoint";
  EXPECT_THROW(run_rl(o), InputError);
  RlOptions tasks_with_judge = rl_options(f, o.run_dir);
  tasks_with_judge.judge = f.checkpoint;
  EXPECT_THROW(run_rl(tasks_with_judge), InputError);
  EXPECT_FALSE(std::filesystem::exists(o.run_dir));

  o.judge = f.checkpoint;
  o.run_dir = f.dir.path() + "/judged-run";
  const RlResult r = run_rl(o);
  ASSERT_EQ(r.steps_run, 2);
  for (const RlStepMetrics& m : r.steps) {
    EXPECT_GT(m.mean_reward, 0.0);
    EXPECT_LT(m.mean_reward, 1.0);
    EXPECT_EQ(m.pass_rate, 0.0);  // a probability below 1 is never a pass
  }
  const std::string table = read_file(o.run_dir + "/rubric_rates.txt");
  EXPECT_NE(table.find("kind"), std::string::npos) << table;
  EXPECT_NE(read_file(o.run_dir + "/run.json").find("\"judge\""), std::string::npos);
}

// PPO's runs: rewards from the built-in rubric, which the micro model earns partly (its tasks'
// verifiers give a random policy 0 everywhere, and the value head would learn nothing).
RlOptions ppo_options(const Fixture& f, const std::string& out) {
  RlOptions o = rl_options(f, out);
  o.tasks.clear();
  o.rubric = "builtin:fortune-answers";
  o.evaluate = false;
  o.estimator = AdvantageEstimator::kPpoGae;
  o.loss.aggregation.mode = LossAggregation::kTokenMean;
  return o;
}

// A PPO run completes, checkpoints its value head, and the head learns: its first values are 0
// (explained variance exactly 0: V predicts nothing), later ones are not, and the value loss
// falls well below that of a head left at zero (½·mean R², what every step would show).
TEST(PosttrainRl, PpoTrainsItsValueHeadAndCheckpointsIt) {
  Fixture f;
  RlOptions o = ppo_options(f, f.dir.path() + "/ppo");
  o.steps = 16;
  o.value_lr = 1e-2;  // the micro model's rows have 32 entries: a faster head than the default
  const RlResult r = run_rl(o);
  ASSERT_EQ(r.steps_run, 16);
  for (const RlStepMetrics& m : r.steps) {
    EXPECT_TRUE(std::isfinite(m.value_loss)) << "step " << m.step;
    EXPECT_GT(m.mean_reward, 0.0) << "step " << m.step;  // the returns are not all 0
    EXPECT_EQ(m.value_clip_fraction, 0.0);               // value_clip 0
    if (m.step > 1) {
      EXPECT_NE(m.explained_variance, 0.0) << "step " << m.step;
    }
  }
  EXPECT_EQ(r.steps.front().explained_variance, 0.0);
  double last = 0;
  for (size_t i = r.steps.size() - 4; i < r.steps.size(); ++i) last += r.steps[i].value_loss / 4;
  EXPECT_LT(last, 0.6 * r.steps.front().value_loss);
  const ValueHead head = ValueHead::load(r.last_checkpoint + "/value_head.safetensors", 32);
  EXPECT_EQ(head.adam_steps(), 16);
  EXPECT_NE(head.bias(), 0.0f);
  const std::string metrics = read_file(o.run_dir + "/metrics.jsonl");
  for (const char* key : {"\"value_loss\"", "\"value_clip_fraction\"", "\"explained_variance\""}) {
    EXPECT_NE(metrics.find(key), std::string::npos) << key;
  }
  const auto record = nlohmann::json::parse(read_file(o.run_dir + "/run.json"));
  EXPECT_EQ(record.at("estimator"), "ppo_gae");
  EXPECT_EQ(record.at("gamma"), 1.0);
  EXPECT_EQ(record.at("lambda"), 0.95);
  EXPECT_EQ(record.at("value_coef"), 0.5);
  EXPECT_EQ(record.at("value_lr"), 1e-2);
  EXPECT_EQ(record.at("value_clip"), 0.0);
  EXPECT_NE(read_file(o.run_dir + "/curves.svg").find("explained variance"), std::string::npos);
}

std::string checkpoint_bytes(const std::string& checkpoint) {
  return read_file(checkpoint + "/model.safetensors") +
         read_file(checkpoint + "/optimizer.safetensors") +
         read_file(checkpoint + "/value_head.safetensors");
}

// Two threads straight through, and one thread stopped after a step and resumed: the same model,
// optimizer and value head, byte for byte (with μ = 2 updates and the value clip binding).
TEST(PosttrainRl, PpoIsDeterministicForAnyThreadCountAndResumesBitwise) {
  Fixture f;
  RlOptions o = ppo_options(f, f.dir.path() + "/two");
  o.updates_per_batch = 2;
  o.value_clip = 0.01;
  o.value_lr = 1e-2;
  RlResult a;
  {
    ThreadPool two(2);
    const ThreadPool::Use use(two);
    a = run_rl(o);
  }
  ASSERT_EQ(a.steps_run, 3);
  double clipped = 0;
  for (const RlStepMetrics& m : a.steps) clipped += m.value_clip_fraction;
  EXPECT_GT(clipped, 0.0);
  RlOptions part = ppo_options(f, f.dir.path() + "/one");
  part.updates_per_batch = 2;
  part.value_clip = 0.01;
  part.value_lr = 1e-2;
  const RlResult b = run_rl_one_thread_stopped_and_resumed(part);
  ASSERT_EQ(b.steps_run, 2);
  EXPECT_EQ(checkpoint_bytes(a.last_checkpoint), checkpoint_bytes(b.last_checkpoint));
  for (size_t i = 0; i < b.steps.size(); ++i) {
    EXPECT_EQ(b.steps[i].value_loss, a.steps[i + 1].value_loss);
    EXPECT_EQ(b.steps[i].loss, a.steps[i + 1].loss);
  }
}

// With γ = λ = 1 and the head at zero, GAE's advantage is the completion's reward at every token
// (δ is the reward at the last token and 0 before it, summed undiscounted), which is exactly
// reinforce_ema's first batch (its baseline starts at 0); and a head at zero sends no gradient
// into the trunk, whatever value_coef. So one step of each leaves the same policy, bit for bit.
TEST(PosttrainRl, PpoFirstStepWithoutDiscountIsReinforceAgainstZero) {
  Fixture f;
  RlOptions ema = ppo_options(f, f.dir.path() + "/ema");
  ema.estimator = AdvantageEstimator::kReinforceEma;
  ema.steps = 1;
  const RlResult e = run_rl(ema);
  for (double coef : {0.0, 0.5}) {
    RlOptions ppo = ppo_options(f, f.dir.path() + "/ppo" + std::to_string(coef));
    ppo.steps = 1;
    ppo.gae = {1.0, 1.0};
    ppo.value_coef = coef;
    const RlResult p = run_rl(ppo);
    EXPECT_EQ(p.steps[0].loss, e.steps[0].loss) << coef;
    EXPECT_EQ(model_bytes(p.last_checkpoint), model_bytes(e.last_checkpoint)) << coef;
  }
  // Not trivially: the step moved the policy.
  EXPECT_NE(model_bytes(e.last_checkpoint), model_bytes(f.checkpoint));
}

TEST(PosttrainRl, RefusesBadInputBeforeWritingAnything) {
  Fixture f;
  RlOptions o = rl_options(f, f.dir.path() + "/never");
  o.temperature = 0;
  EXPECT_THROW(run_rl(o), InputError);
  o = rl_options(f, f.dir.path() + "/never");
  o.top_k = 5;  // sampling from a truncated distribution would not match the update's log-probs
  EXPECT_THROW(run_rl(o), InputError);
  o = rl_options(f, f.dir.path() + "/never");
  o.eval.problems_per_cell = 0;
  EXPECT_THROW(run_rl(o), InputError);
  o = rl_options(f, f.dir.path() + "/never");
  o.group_size = 1;
  EXPECT_THROW(run_rl(o), InputError);
  o = rl_options(f, f.dir.path() + "/never");
  o.loss.clip_low = 1.5;
  EXPECT_THROW(run_rl(o), InputError);
  o = rl_options(f, f.dir.path() + "/never");
  o.tasks = "";
  EXPECT_THROW(run_rl(o), InputError);
  o = rl_options(f, f.dir.path() + "/never");
  o.updates_per_batch = 2;
  o.loss.objective = PolicyObjective::kReinforce;
  EXPECT_THROW(run_rl(o), InputError);
  // PPO's options.
  const std::vector<std::pair<std::function<void(RlOptions&)>, std::string>> ppo_bad = {
      {[](RlOptions& x) { x.gae.gamma = 1.5; }, "--gamma"},
      {[](RlOptions& x) { x.gae.gamma = -0.1; }, "--gamma"},
      {[](RlOptions& x) { x.gae.lambda = 1.01; }, "--lam"},
      {[](RlOptions& x) { x.gae.lambda = std::nan(""); }, "--lam"},
      {[](RlOptions& x) { x.value_coef = -0.5; }, "--value-coef"},
      {[](RlOptions& x) { x.value_clip = -0.2; }, "--value-clip"},
      {[](RlOptions& x) { x.value_lr = 0; }, "--value-lr"},
      {[](RlOptions& x) { x.value_lr = -1e-3; }, "--value-lr"}};
  for (const auto& [spoil, option] : ppo_bad) {
    o = rl_options(f, f.dir.path() + "/never");
    o.estimator = AdvantageEstimator::kPpoGae;
    spoil(o);
    const std::string message = input_error([&] { run_rl(o); });
    EXPECT_NE(message.find(option), std::string::npos) << option << ": " << message;
  }
  EXPECT_FALSE(std::filesystem::exists(f.dir.path() + "/never"));
}

// The packed batch scores every marked token as the sequence alone would: packing changes
// neither which tokens a token sees (each starts a document) nor, beyond float rounding of the
// rotary positions, its log-probability.
struct RandomSequences {
  std::vector<std::vector<uint32_t>> ids;
  std::vector<std::vector<uint8_t>> marks;
};

// n sequences of 2 to 41 tokens after the begin token 295, two thirds of them marked.
RandomSequences random_sequences(int n, uint64_t seed) {
  Rng rng(seed);
  RandomSequences r;
  for (int k = 0; k < n; ++k) {
    const size_t len = 2 + rng.next_u64() % 40;
    std::vector<uint32_t> s = {295};
    std::vector<uint8_t> m = {0};
    for (size_t i = 1; i < len; ++i) {
      s.push_back(static_cast<uint32_t>(rng.next_u64() % 295));
      m.push_back(rng.next_u64() % 3 == 0 ? 0 : 1);
    }
    r.ids.push_back(s);
    r.marks.push_back(m);
  }
  return r;
}

TEST(PosttrainSequenceBatch, PackedLogprobsEqualEachSequenceAlone) {
  Fixture f;
  const std::unique_ptr<Gpt> model = load_model(f.checkpoint);
  model->init_parameters(9);
  const auto [ids, marks] = random_sequences(23, 3);
  SequenceBatch batch(ids, marks, 128, 295);
  EXPECT_GT(batch.rows(), 1);
  const std::vector<double> lp = batch.logprobs(*model, 2, 0.7f);
  for (size_t k = 0; k < ids.size(); ++k) {
    std::vector<int32_t> in(ids[k].begin(), ids[k].end() - 1), tg(ids[k].begin() + 1, ids[k].end());
    std::vector<float> per(in.size());
    TokenLossT<float> tl;
    tl.temperature = 0.7f;
    model->forward_loss(in, tg, 2, per.data(), 0, tl);
    int64_t j = batch.offsets()[k];
    for (size_t i = 1; i < ids[k].size(); ++i) {
      if (marks[k][i] == 0) continue;
      EXPECT_NEAR(lp[static_cast<size_t>(j)], -per[i - 1], 1e-4)
          << "sequence " << k << " token " << i;
      ++j;
    }
    EXPECT_EQ(j, batch.offsets()[k + 1]);
  }
}

// With a value head: each marked token's value is the head's on the final-norm row of the
// position that predicts it, as for the sequence alone; the backward sends dL/dV through the head
// (its gradients) and, scaled by the value coefficient, into the trunk at those rows, as the
// sequences' own backwards with the rows' gradient given by hand would; with coefficient 0 the
// trunk's gradient is the plain backward's, bit for bit.
TEST(PosttrainSequenceBatch, ValuesAndTheirGradientsAreTheRowsThatPredictEachToken) {
  Fixture f;
  // fp32 products, so packed and alone differ by float rounding only (bf16's would hide a
  // misplaced row less well).
  Config config = load_model(f.checkpoint)->config();
  config.precision = PrecisionSetting::kFp32;
  const auto model = std::make_unique<Gpt>(config);
  model->init_parameters(9);
  const int64_t d = model->config().model_dim;
  ValueHead head(d);
  Rng rng(12);
  for (float& w : head.weight()) w = static_cast<float>(rng.uniform() - 0.5);
  head.set_bias(0.25f);
  const auto [ids, marks] = random_sequences(9, 4);
  SequenceBatch batch(ids, marks, 128, 295);
  EXPECT_GT(batch.rows(), 1);
  const float tau = 0.7f;
  std::vector<double> values;
  const std::vector<double> lp = batch.logprobs(*model, 2, tau, nullptr, head, values);
  EXPECT_EQ(lp, batch.logprobs(*model, 2, tau));  // the values change nothing else
  const auto n = static_cast<size_t>(batch.marked_tokens());
  ASSERT_EQ(values.size(), n);
  std::vector<double> grad_logp(n), grad_values(n);
  for (size_t j = 0; j < n; ++j) {
    grad_logp[j] = rng.uniform() - 0.5;
    grad_values[j] = rng.uniform() - 0.5;
  }
  const double coef = 0.5;

  // Each sequence alone: its values, and its backward with the value rows' gradient by hand.
  model->zero_grads();
  std::vector<double> head_grads(static_cast<size_t>(d + 1), 0.0);
  for (size_t k = 0; k < ids.size(); ++k) {
    std::vector<int32_t> in(ids[k].begin(), ids[k].end() - 1), tg(ids[k].begin() + 1, ids[k].end());
    std::vector<float> weights(in.size(), 0.0f), rows_grad(in.size() * static_cast<size_t>(d));
    TokenLossT<float> tl;
    tl.temperature = tau;
    model->forward_loss(in, tg, 2, nullptr, 0, tl);
    int64_t j = batch.offsets()[k];
    for (size_t i = 1; i < ids[k].size(); ++i) {
      if (marks[k][i] == 0) continue;
      const float* row = model->final_norm().data() + (i - 1) * static_cast<size_t>(d);
      EXPECT_NEAR(values[static_cast<size_t>(j)], head.value(row), 1e-4)
          << "sequence " << k << " token " << i;
      for (int64_t c = 0; c < d; ++c) {
        head_grads[static_cast<size_t>(c)] += grad_values[static_cast<size_t>(j)] * row[c];
        rows_grad[(i - 1) * static_cast<size_t>(d) + static_cast<size_t>(c)] =
            static_cast<float>(coef * grad_values[static_cast<size_t>(j)] * head.weight()[c]);
      }
      head_grads.back() += grad_values[static_cast<size_t>(j)];
      weights[i - 1] = static_cast<float>(-grad_logp[static_cast<size_t>(j)]);
      ++j;
    }
    EXPECT_EQ(j, batch.offsets()[k + 1]);
    tl.weights = weights;
    tl.final_norm_grad = rows_grad;
    model->forward_backward(in, tg, 2, 1.0f, 0, nullptr, tl);
  }
  const AlignedVector<float> alone = model->grads();

  model->zero_grads();
  head.zero_grads();
  batch.backward(*model, 2, tau, grad_logp, head, grad_values, coef);
  const AlignedVector<float> packed = model->grads();
  std::vector<double> alone64(alone.begin(), alone.end());
  for (const ParamTensor& t : model->params().tensors()) {
    EXPECT_LT(gradient_relative_error(t, packed.data(), alone64.data()), 1e-3) << t.name;
  }
  for (size_t c = 0; c < head_grads.size(); ++c) {
    EXPECT_NEAR(head.grads()[c], head_grads[c], 1e-4 * (1 + std::abs(head_grads[c]))) << c;
  }

  // value_coef 0: the trunk's gradient is the plain backward's, bit for bit.
  model->zero_grads();
  batch.backward(*model, 2, tau, grad_logp);
  const AlignedVector<float> plain = model->grads();
  model->zero_grads();
  batch.backward(*model, 2, tau, grad_logp, head, grad_values, 0.0);
  EXPECT_TRUE(std::equal(plain.begin(), plain.end(), model->grads().begin()));
  EXPECT_FALSE(std::equal(plain.begin(), plain.end(), packed.begin()));
}

DpoOptions dpo_options(const Fixture& f, const std::string& out) {
  DpoOptions o;
  o.checkpoint = f.checkpoint;
  o.tokenizer = f.tokenizer;
  o.tokenizer_record = f.tokenizer_record;
  o.pairs = write_pairs(f.dir.path() + "/pairs.jsonl", 32);
  o.run_dir = out;
  o.epochs = 4;
  o.pairs_per_step = 8;
  o.lr_scale = 1.0;
  return o;
}

TEST(PosttrainDpo, PrefersTheChosenRepliesAndResumesBitwise) {
  Fixture f;
  const DpoRunResult a = run_dpo(dpo_options(f, f.dir.path() + "/dpo"));
  ASSERT_EQ(a.steps_run, 16);
  // At step 1 the policy is the reference: every reward 0 (up to the float rounding of packing
  // the sequences into other rows), the sigmoid loss log 2.
  EXPECT_NEAR(a.history.front().loss, std::log(2.0), 1e-4);
  EXPECT_NEAR(a.history.front().margin, 0.0, 1e-3);
  // By the end the chosen replies are preferred.
  EXPECT_GT(a.history.back().margin, 0.3);
  EXPECT_EQ(a.history.back().accuracy, 1.0);
  EXPECT_LT(a.history.back().loss, 0.75 * std::log(2.0));
  DpoOptions part = dpo_options(f, f.dir.path() + "/part");
  part.max_steps = 5;
  ThreadPool one(1);
  const ThreadPool::Use use(one);
  run_dpo(part);
  part.max_steps = 0;
  part.resume = true;
  const DpoRunResult b = run_dpo(part);
  EXPECT_EQ(b.steps_run, 11);
  EXPECT_EQ(model_bytes(a.last_checkpoint), model_bytes(b.last_checkpoint));
}

TEST(PosttrainDpo, RefusesBadInputBeforeWritingAnything) {
  Fixture f;
  DpoOptions o = dpo_options(f, f.dir.path() + "/never");
  o.loss.beta = 0;
  EXPECT_THROW(run_dpo(o), InputError);
  o.loss.beta = 0.1;
  write_file_atomic(o.pairs,
                    "{\"prompt\": \"hi\", \"chosen\": \"a\", \"rejected\": \"b\"}\n"
                    "{\"prompt\": \"hi\", \"chosen\": \"a\"}\n");
  try {
    run_dpo(o);
    FAIL() << "a pair without its rejected reply";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("pairs.jsonl:2"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("rejected"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(std::filesystem::exists(o.run_dir));
  // On-policy pairs from a policy that solves nothing: every completion scores 0, no pair.
  o.pairs.clear();
  o.tasks = "addition:1";
  o.policy_pairs.problems = 4;
  o.policy_pairs.group_size = 3;
  o.policy_pairs.max_tokens = 4;
  try {
    run_dpo(o);
    FAIL() << "no pair can be built";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("no pair could be built"), std::string::npos) << e.what();
  }
  // Both sources, or neither.
  o.pairs = f.dir.path() + "/pairs.jsonl";
  EXPECT_THROW(run_dpo(o), InputError);
  EXPECT_FALSE(std::filesystem::exists(o.run_dir));
}

// The three commands through the binary: a run that works prints its last checkpoint; bad
// options end with a specific message and a non-zero exit.
TEST(PosttrainCli, CommandsRunAndRefuseBadOptions) {
  Fixture f;
  const std::string chat = write_conversations(f.dir.path() + "/chat.jsonl", 16);
  const std::string base = " --checkpoint " + f.checkpoint + " --out " + f.dir.path();
  CommandResult r = run_nanogpt("sft" + base + "/sft --data " + chat + " --epochs 1");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("/sft/checkpoints/step_"), std::string::npos) << r.out;
  // Again into the same directory: refused, --resume is how to continue it.
  r = run_nanogpt("sft" + base + "/sft --data " + chat);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("--resume"), std::string::npos) << r.err;
  r = run_nanogpt("sft" + base + "/x");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("--data FILE.jsonl or --tasks"), std::string::npos) << r.err;
  r = run_nanogpt("rl" + base + "/y --tasks sort:1 --estimator ppo_gae --lam 1.5");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("--lam 1.5"), std::string::npos) << r.err;
  r = run_nanogpt("rl" + base +
                  "/ppo --tasks sort:1 --estimator ppo_gae --gamma 0.99 --lam 0.9 --value-coef 0.1 "
                  "--value-lr 0.002 --value-clip 0.2 --whiten-advantages --steps 1 --prompts 1 "
                  "--group 1 --max-tokens 3 --no-eval");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(std::filesystem::exists(f.dir.path() +
                                      "/ppo/checkpoints/step_000001/value_head.safetensors"));
  const auto record = nlohmann::json::parse(read_file(f.dir.path() + "/ppo/run.json"));
  EXPECT_EQ(record.at("gamma"), 0.99);
  EXPECT_EQ(record.at("lambda"), 0.9);
  EXPECT_EQ(record.at("whiten_advantages"), true);
  r = run_nanogpt("rl" + base + "/y --tasks sort:1 --estimator nonsense");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("grpo"), std::string::npos) << r.err;
  r = run_nanogpt("dpo" + base + "/z --pairs " + f.dir.path() + "/missing.jsonl");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("missing.jsonl"), std::string::npos) << r.err;
  r = run_nanogpt("dpo" + base + "/z --pairs " + chat + " --loss squared");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("sigmoid"), std::string::npos) << r.err;
  EXPECT_FALSE(std::filesystem::exists(f.dir.path() + "/x"));
  EXPECT_FALSE(std::filesystem::exists(f.dir.path() + "/y"));
  EXPECT_FALSE(std::filesystem::exists(f.dir.path() + "/z"));
}

}  // namespace
}  // namespace nanogpt
