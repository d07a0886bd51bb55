// `nanogpt speedrun` end to end on the micro model and synthetic shards laid out as a prepared
// fortunes directory (tokenizer.json and shards/meta.json present, so nothing is prepared): it
// stops at the first validation at or below the target, prints one JSON line, keeps the same line
// in the run directory, and the same seed gives the same steps.
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <sstream>

#include "config/config.hpp"
#include "runtime/file_io.hpp"
#include "support/fixtures.hpp"
#include "support/model.hpp"

namespace nanogpt {
namespace {

// A corpus directory as `prepare fortunes` leaves it, holding the synthetic language.
std::string prepared_corpus(const std::string& root) {
  const std::string dir = root + "/corpus";
  std::filesystem::create_directories(dir + "/shards");
  write_synthetic_shards(dir + "/shards");
  write_file_atomic(dir + "/tokenizer.json", "{}");  // present, so preparing skips it
  write_file_atomic(dir + "/shards/meta.json",
                    R"({"tokenizer": {"spec": "synthetic", "vocab_size": 300, "eot_id": 299}})");
  return dir;
}

// The micro model for `iterations` steps as DIR/micro.json, without val_loss_every so that
// --val-every decides (a file's or --set's value wins over it).
std::string micro_config_file(const std::string& dir, int64_t iterations) {
  Config c = micro_config();
  c.num_iterations = iterations;
  c.checkpoint_every = 0;
  c.precision = PrecisionSetting::kFp32;
  nlohmann::json file = config_to_json(c);
  file.erase("val_loss_every");
  write_file_atomic(dir + "/micro.json", file.dump());
  return dir + "/micro.json";
}

std::vector<nlohmann::json> metrics_rows(const std::string& run_dir) {
  std::istringstream in(read_file(run_dir + "/metrics.jsonl"));
  std::vector<nlohmann::json> rows;
  for (std::string line; std::getline(in, line);) rows.push_back(nlohmann::json::parse(line));
  return rows;
}

TEST(SpeedrunCli, StopsAtTheTargetPrintsTheRecordAndRepeatsItsSteps) {
  TempDir dir;
  const std::string corpus = prepared_corpus(dir.path());
  const std::string config = micro_config_file(dir.path(), 60);
  const int64_t tokens_per_step = micro_config().tokens_per_step;
  // ln(300) = 5.70 at the start; the bigram language is learnt well below 5.0 within 60 steps.
  const double target = 5.0;
  auto run = [&](const std::string& out) {
    return run_nanogpt("speedrun --config " + config + " --data " + corpus +
                       " --target 5.0 --val-every 4 --out " + dir.path() + "/" + out);
  };
  const CommandResult first = run("a");
  ASSERT_EQ(first.exit_code, 0) << first.err;
  const auto record = nlohmann::json::parse(first.out);
  EXPECT_TRUE(record["reached"].get<bool>());
  const int64_t steps = record["steps"].get<int64_t>();
  EXPECT_GT(steps, 0);
  EXPECT_LT(steps, 60) << "it stops at the target, not at the step budget";
  EXPECT_EQ(steps % 4, 0) << "it can stop only where it validates";
  EXPECT_LE(record["val_loss"].get<double>(), target);
  EXPECT_EQ(record["tokens"].get<int64_t>(), steps * tokens_per_step);
  EXPECT_GT(record["train_seconds"].get<double>(), 0);
  EXPECT_TRUE(record.contains("loadavg_before") && record.contains("loadavg_after"));
  EXPECT_EQ(read_file(dir.path() + "/a/speedrun.json"), first.out)
      << "the run directory keeps the printed record";

  // The validation before the last was above the target, and nothing ran past the stop.
  const auto rows = metrics_rows(dir.path() + "/a");
  double previous_val = 1e9;
  int64_t last_step = 0;
  for (const auto& r : rows) {
    last_step = std::max(last_step, r["step"].get<int64_t>());
    if (r.contains("val_loss") && !r["val_loss"].is_null() && r["step"].get<int64_t>() < steps) {
      previous_val = r["val_loss"].get<double>();
    }
  }
  EXPECT_EQ(last_step, steps);
  EXPECT_GT(previous_val, target);

  const CommandResult second = run("b");
  ASSERT_EQ(second.exit_code, 0) << second.err;
  const auto again = nlohmann::json::parse(second.out);
  EXPECT_EQ(again["steps"], record["steps"]) << "same seed, same machine: same steps";
  EXPECT_EQ(again["val_loss"], record["val_loss"]);

  // A directory that exists is refused (a speedrun starts fresh), and so is a NaN target.
  const CommandResult exists = run("a");
  EXPECT_EQ(exists.exit_code, 1);
  EXPECT_NE(exists.err.find("exists"), std::string::npos) << exists.err;
  const CommandResult nan_target = run_nanogpt("speedrun --config " + config + " --data " + corpus +
                                               " --target nan --out " + dir.path() + "/c");
  EXPECT_NE(nan_target.exit_code, 0);
  EXPECT_NE(nan_target.err.find("--target"), std::string::npos) << nan_target.err;
  EXPECT_FALSE(std::filesystem::exists(dir.path() + "/c"));
}

TEST(SpeedrunCli, ATargetNeverReachedRunsTheBudgetAndSaysSo) {
  TempDir dir;
  const std::string corpus = prepared_corpus(dir.path());
  const std::string config = micro_config_file(dir.path(), 4);
  const CommandResult r = run_nanogpt("speedrun --config " + config + " --data " + corpus +
                                      " --target 0.5 --val-every 2 --out " + dir.path() + "/run");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto record = nlohmann::json::parse(r.out);
  EXPECT_FALSE(record["reached"].get<bool>());
  EXPECT_EQ(record["steps"].get<int64_t>(), 4);
  EXPECT_GT(record["val_loss"].get<double>(), 0.5);
  EXPECT_NE(r.err.find("did not reach"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace nanogpt
