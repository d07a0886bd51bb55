// `nanogpt bench rollout` through the binary on a micro checkpoint: one JSON line whose fields
// agree with each other and with the completions it dumps, and --batch-one sampling the same
// completions as the batch. Timings are never asserted: the machine is shared.
#include <gtest/gtest.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <string>

#include "data/chat_format.hpp"
#include "runtime/file_io.hpp"
#include "support/chat_checkpoint.hpp"
#include "support/fixtures.hpp"

namespace nanogpt {
namespace {

TEST(BenchRollout, PrintsOneJsonLineAndBatchOneSamplesTheSame) {
  const MicroChatCheckpoint f;
  const std::string common = "bench rollout --checkpoint " + f.checkpoint +
                             " --tasks addition:1,reverse:1 --prompts 3 --group 4 "
                             "--max-tokens 8 --repeats 2 --warmup 0 --seed 5 ";
  const std::string dir = f.dir.path();
  const auto batched = run_nanogpt(common + "--dump-prompts " + dir + "/prompts.json " +
                                   "--dump-completions " + dir + "/batched.json");
  ASSERT_EQ(batched.exit_code, 0) << batched.err;
  ASSERT_EQ(std::count(batched.out.begin(), batched.out.end(), '\n'), 1) << batched.out;
  const auto j = nlohmann::json::parse(batched.out);
  for (const char* key :
       {"tokens_per_s_best", "tokens_per_s_median", "prompts", "group", "max_tokens",
        "mean_completion_tokens", "threads", "cpu", "revision", "loadavg_before", "loadavg_after",
        "tokens", "seconds", "precision", "batching"}) {
    EXPECT_TRUE(j.contains(key)) << key << " missing from " << batched.out;
  }
  EXPECT_EQ(j["bench"], "rollout");
  EXPECT_EQ(j["batching"], "batched");
  EXPECT_EQ(j["prompts"], 3);
  EXPECT_EQ(j["group"], 4);
  EXPECT_EQ(j["max_tokens"], 8);
  EXPECT_EQ(j["seconds"].size(), 2u);
  EXPECT_GT(j["tokens_per_s_best"].get<double>(), 0);
  EXPECT_GE(j["tokens_per_s_best"].get<double>(), j["tokens_per_s_median"].get<double>());
  EXPECT_GE(j["threads"].get<int>(), 1);
  EXPECT_FALSE(j["cpu"].get<std::string>().empty());

  // The dumps: three prompts in the chat format (no begin token), twelve completions whose
  // tokens are what the line counts.
  const auto prompts = nlohmann::json::parse(read_file(dir + "/prompts.json"));
  ASSERT_EQ(prompts["prompts"].size(), 3u);
  const BpeTokenizer tok = chat_micro_tokenizer();
  EXPECT_EQ(prompts["eot_id"], tok.eot_id());
  EXPECT_EQ(prompts["assistant_end"], chat_tokens(tok).assistant_end);
  EXPECT_EQ(prompts["prompts"][0][0], chat_tokens(tok).user_start);
  const auto completions = nlohmann::json::parse(read_file(dir + "/batched.json"));
  ASSERT_EQ(completions["completions"].size(), 3u);
  int64_t tokens = 0;
  for (const auto& group : completions["completions"]) {
    ASSERT_EQ(group.size(), 4u);
    for (const auto& sample : group) {
      EXPECT_LE(sample.size(), 9u);  // max_tokens + the <|endoftext|> a sample may draw
      tokens += static_cast<int64_t>(sample.size());
    }
  }
  EXPECT_EQ(j["tokens"].get<int64_t>(), tokens);
  EXPECT_DOUBLE_EQ(j["mean_completion_tokens"].get<double>(), static_cast<double>(tokens) / 12);

  const auto one = run_nanogpt(common + "--batch-one --dump-completions " + dir + "/one.json");
  ASSERT_EQ(one.exit_code, 0) << one.err;
  const auto j1 = nlohmann::json::parse(one.out);
  EXPECT_EQ(j1["batching"], "one_at_a_time");
  EXPECT_GT(j1["tokens_per_s_best"].get<double>(), 0);
  EXPECT_EQ(j1["tokens"], j["tokens"]);
  EXPECT_EQ(nlohmann::json::parse(read_file(dir + "/one.json")), completions);
}

TEST(BenchRollout, RefusesATokenizerWithoutChatTokens) {
  const MicroChatCheckpoint plain(false);
  const auto r = run_nanogpt("bench rollout --checkpoint " + plain.checkpoint);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("<|user_start|>"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace nanogpt
