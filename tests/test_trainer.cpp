#include <gtest/gtest.h>

#include <csignal>
#include <thread>

#include <cmath>

#include "data/bpe_tokenizer.hpp"
#include "model/model_io.hpp"
#include "runtime/checkpoint.hpp"
#include "runtime/error.hpp"
#include "runtime/file_io.hpp"
#include "support/fixtures.hpp"
#include "support/model.hpp"
#include "support/train_run.hpp"
#include "train/trainer.hpp"

namespace nanogpt {
namespace {

std::vector<double> losses_of(const std::string& run_dir) {
  std::vector<double> out;
  std::string text = read_file(run_dir + "/metrics.jsonl");
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    auto j = nlohmann::json::parse(text.substr(pos, end - pos));
    out.push_back(j.at("loss").get<double>());
    if (j.contains("val_loss")) out.push_back(j["val_loss"].get<double>());
    pos = end + 1;
  }
  return out;
}

TrainOptions options_for(const TempDir& data, const std::string& run) {
  return micro_train_options(data.path(), run);
}

TEST(Trainer, LearnsAndWritesRunArtifacts) {
  TempDir data;
  write_synthetic_shards(data.path());
  TrainOptions o = options_for(data, data.path() + "/run");
  o.config.num_iterations = 30;
  o.config.val_loss_every = 10;
  TrainResult r = train(o);
  EXPECT_EQ(r.final_step, 30);
  auto losses = losses_of(o.run_dir);
  EXPECT_LT(losses.back(), losses.front() - 1.0)
      << "validation loss should fall well below the start";
  EXPECT_TRUE(file_exists(o.run_dir + "/run.json"));
  auto run = nlohmann::json::parse(read_file(o.run_dir + "/run.json"));
  EXPECT_EQ(run["config"]["num_iterations"], 30);
  EXPECT_FALSE(run["cpu"].get<std::string>().empty());
  // The key as set, and what it resolved to on this CPU: the model's precision.
  EXPECT_EQ(run["config"]["precision"], "auto");
  EXPECT_EQ(run["precision"], precision_name(resolved_precision(o.config)));
  std::string ckpt = find_latest_checkpoint(o.run_dir);
  EXPECT_NE(ckpt.find("step_000030"), std::string::npos);
  auto model = load_model(ckpt);
  EXPECT_EQ(model->config().num_iterations, 30);
}

// The speedrun track's stop: the first validation at or below the target ends the run there,
// with a checkpoint; the run's time counts its steps only.
TEST(Trainer, StopsAtTheFirstValidationAtOrBelowTheTarget) {
  TempDir data;
  write_synthetic_shards(data.path());
  TrainOptions full = options_for(data, data.path() + "/full");
  full.config.num_iterations = 30;
  full.config.val_loss_every = 5;
  full.config.checkpoint_every = 0;
  train(full);
  // The target: halfway between the 2nd and 3rd validation losses of the full run.
  std::vector<std::pair<int64_t, double>> vals;
  const std::string text = read_file(full.run_dir + "/metrics.jsonl");
  for (size_t pos = 0, end; pos < text.size(); pos = end + 1) {
    end = text.find('\n', pos);
    const auto j = nlohmann::json::parse(text.substr(pos, end - pos));
    if (j.contains("val_loss"))
      vals.emplace_back(j["step"].get<int64_t>(), j["val_loss"].get<double>());
  }
  ASSERT_GE(vals.size(), 3u);
  ASSERT_GT(vals[1].second, vals[2].second) << "the loss should fall between validations";
  TrainOptions o = options_for(data, data.path() + "/target");
  o.config = full.config;
  o.target_val_loss = (vals[1].second + vals[2].second) / 2;
  const TrainResult r = train(o);
  EXPECT_TRUE(r.reached_target);
  EXPECT_FALSE(r.interrupted);
  EXPECT_EQ(r.final_step, vals[2].first);
  EXPECT_EQ(r.final_val_loss, vals[2].second);  // same seed: the same run up to there
  EXPECT_EQ(r.trained_tokens, vals[2].first * o.config.tokens_per_step);
  EXPECT_GT(r.train_seconds, 0);
  EXPECT_NE(find_latest_checkpoint(o.run_dir).find("step_0000" + std::to_string(vals[2].first)),
            std::string::npos);
  // A target never reached: every step runs and the result says so.
  TrainOptions never = options_for(data, data.path() + "/never");
  never.config = full.config;
  never.config.num_iterations = 10;
  never.target_val_loss = 0.0;
  const TrainResult n = train(never);
  EXPECT_FALSE(n.reached_target);
  EXPECT_EQ(n.final_step, 10);
}

TEST(Trainer, ResumedRunReproducesUninterruptedLossesBitwise) {
  TempDir data;
  write_synthetic_shards(data.path());
  TrainOptions full = options_for(data, data.path() + "/full");
  train(full);
  TrainOptions part = options_for(data, data.path() + "/part");
  part.max_steps =
      3;  // stops after step 3 with a checkpoint (checkpoint_every = 2 also wrote step 2)
  TrainResult first = train(part);
  EXPECT_EQ(first.final_step, 3);
  part.max_steps = 0;
  part.resume = true;
  TrainResult second = train(part);
  EXPECT_EQ(second.final_step, 6);
  EXPECT_EQ(losses_of(full.run_dir), losses_of(part.run_dir));  // exact double equality
}

TEST(Trainer, InterruptFinishesTheStepCheckpointsAndResumes) {
  TempDir data;
  write_synthetic_shards(data.path());
  TrainOptions full = options_for(data, data.path() + "/full");
  // Long enough that the interrupt lands mid-run.
  full.config.num_iterations = 60;
  full.config.val_loss_every = 20;
  full.config.checkpoint_every = 0;
  train(full);
  TrainOptions part = options_for(data, data.path() + "/part");
  part.config = full.config;
  // A late signal (after train() restored the previous handler) must not kill the test.
  struct sigaction quiet {
  }, previous{};
  quiet.sa_handler = [](int) {};
  sigaction(SIGINT, &quiet, &previous);
  std::thread interrupter([&] {
    while (!file_exists(part.run_dir + "/metrics.jsonl") ||
           read_file(part.run_dir + "/metrics.jsonl").empty()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    std::raise(SIGINT);  // as Ctrl-C would
  });
  TrainResult r = train(part);
  interrupter.join();
  sigaction(SIGINT, &previous, nullptr);
  EXPECT_TRUE(r.interrupted);
  EXPECT_LT(r.final_step, 60);
  EXPECT_FALSE(find_latest_checkpoint(part.run_dir).empty());
  part.resume = true;
  train(part);
  EXPECT_EQ(losses_of(full.run_dir), losses_of(part.run_dir));
}

TEST(Trainer, DivergenceStopsNamingStepAndFirstNonFiniteTensor) {
  TempDir data;
  write_synthetic_shards(data.path());
  TrainOptions o = options_for(data, data.path() + "/run");
  o.config.adam_embed_lr = 1e38;  // the first update overflows the embeddings
  try {
    train(o);
    FAIL() << "expected the run to stop";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("diverged at step 2"), std::string::npos) << what;
    EXPECT_NE(what.find("first non-finite tensor"), std::string::npos) << what;
    EXPECT_NE(what.find("embed"), std::string::npos) << what;
  }
}

TEST(Trainer, SampleIsReproducibleForASeed) {
  TempDir data;
  write_synthetic_shards(data.path());
  TrainOptions o = options_for(data, data.path() + "/run");
  o.config.num_iterations = 4;
  train(o);
  // A tokenizer whose ids cover the micro model's 300 (256 bytes, 43 merges, <|endoftext|>).
  std::vector<std::pair<uint32_t, uint32_t>> merges;
  for (uint32_t i = 0; i < 43; ++i) merges.emplace_back(97 + i % 26, 97 + i / 26);
  write_file_atomic(data.path() + "/tok.json",
                    BpeTokenizer::from_merges(merges, {std::string(kEndOfText)}).to_json());
  const std::string args = "sample --checkpoint " + o.run_dir + " --tokenizer " + data.path() +
                           "/tok.json --prompt hello --max-tokens 40 --temperature 1.0 --seed ";
  auto a = run_nanogpt(args + "7"), b = run_nanogpt(args + "7"), c = run_nanogpt(args + "8");
  ASSERT_EQ(a.exit_code, 0) << a.err;
  EXPECT_EQ(a.out, b.out);
  EXPECT_NE(a.out, c.out);
  EXPECT_EQ(a.out.rfind("hello", 0), 0u) << "output starts with the prompt";
  auto eval =
      run_nanogpt("eval --checkpoint " + o.run_dir + " --val '" + data.path() + "/val_*.bin'");
  ASSERT_EQ(eval.exit_code, 0) << eval.err;
  auto j = nlohmann::json::parse(eval.out);
  EXPECT_EQ(j["tokens"], o.config.val_tokens);
  EXPECT_TRUE(std::isfinite(j["val_loss"].get<double>()));
}

TEST(Trainer, RefusesMismatchedCheckpointAndBadData) {
  TempDir data;
  write_synthetic_shards(data.path());
  TrainOptions o = options_for(data, data.path() + "/run");
  o.config.num_iterations = 2;
  train(o);
  TrainOptions other = o;
  other.resume = true;
  other.config.model_dim = 64;
  other.config.head_dim = 32;
  EXPECT_THROW(train(other), InputError);
  // Weights of a different shape are refused with the tensor named.
  Config big = o.config;
  big.model_dim = 64;
  big.head_dim = 32;
  Gpt model(big);
  try {
    load_model_weights(model, find_latest_checkpoint(o.run_dir));
    FAIL();
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("embed.weight"), std::string::npos) << e.what();
  }
  TrainOptions nodata = options_for(data, data.path() + "/x");
  nodata.train_pattern = data.path() + "/nothing_*.bin";
  EXPECT_THROW(train(nodata), InputError);
  TrainOptions small_vocab = options_for(data, data.path() + "/y");
  small_vocab.config.vocab_size = 100;  // the shards hold ids up to 299
  small_vocab.config.eot_id = 99;
  EXPECT_THROW(train(small_vocab), InputError);
}

}  // namespace
}  // namespace nanogpt
