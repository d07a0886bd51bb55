#include <gtest/gtest.h>

#include <csignal>
#include <thread>

#include "model/model_io.hpp"
#include "runtime/checkpoint.hpp"
#include "runtime/error.hpp"
#include "runtime/file_io.hpp"
#include "test_support.hpp"
#include "test_support_model.hpp"
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
  TrainOptions o;
  o.config = micro_config();
  o.train_pattern = data.path() + "/train_*.bin";
  o.val_pattern = data.path() + "/val_*.bin";
  o.run_dir = run;
  o.live_line = false;
  return o;
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
  std::string ckpt = find_latest_checkpoint(o.run_dir);
  EXPECT_NE(ckpt.find("step_000030"), std::string::npos);
  auto model = load_model(ckpt);
  EXPECT_EQ(model->config().num_iterations, 30);
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
