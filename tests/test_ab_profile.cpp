// bench/ab_profile.py, the A/B profile of two builds, run on the built binary against itself
// with a tiny model: its table, its verdict on the loss bits, and its errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <sstream>
#include <string>
#include <vector>

#include "support/fixtures.hpp"

namespace nanogpt {
namespace {

const std::string kTinyTrain =
    " -- --config cpu --set vocab_size=300 --set eot_id=299 --set model_dim=32 --set num_heads=2"
    " --set head_dim=16 --set train_seq_len=128 --set tokens_per_step=256 --set block_size=32"
    " --set precision=fp32 --steps 1";

CommandResult ab_profile(const std::string& args) {
  return run_command("/usr/bin/python3 " + source_path("bench/ab_profile.py") + " " + args);
}

TEST(AbProfile, AlternatesPairsAndTablesEachOpsMedians) {
  const std::string binary = NANOGPT_BINARY;
  const CommandResult r = ab_profile("--a " + binary + " --b " + binary +
                                     " --pairs 2 --top 3 --ops embed.norm" + kTinyTrain);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  // Pair 1 runs A first, pair 2 B first.
  const size_t a1 = r.out.find("pair 1 A:"), b1 = r.out.find("pair 1 B:");
  const size_t a2 = r.out.find("pair 2 A:"), b2 = r.out.find("pair 2 B:");
  ASSERT_NE(a1, std::string::npos) << r.out;
  ASSERT_NE(b2, std::string::npos) << r.out;
  EXPECT_LT(a1, b1);
  EXPECT_LT(b2, a2);
  // One binary on a fixed seed: the same loss bits in every run.
  EXPECT_NE(r.out.find("in every run (the same bits)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("op (self ms per run)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("train_step (total)"), std::string::npos) << r.out;
  // Asked for by name, whatever its rank by time.
  EXPECT_NE(r.out.find("\nembed.norm "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("/2\n"), std::string::npos) << r.out;
}

TEST(AbProfile, MarkdownTableHasOneRowPerOpInFiveColumns) {
  const std::string binary = NANOGPT_BINARY;
  const CommandResult r =
      ab_profile("--a " + binary + " --b " + binary +
                 " --pairs 1 --top 0 --ops embed.norm,final_norm --markdown" + kTinyTrain);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::vector<std::string> table;
  std::istringstream lines(r.out);
  for (std::string line; std::getline(lines, line);) {
    if (!line.empty() && line[0] == '|') table.push_back(line);
  }
  // The header, the rule, tokens/s and the two ops asked for by name, in that order (--top 0:
  // no others, whatever the run's times).
  ASSERT_EQ(table.size(), 5u) << r.out;
  EXPECT_EQ(table[0], "| op (self ms per run) | A | B | B/A | B better in |");
  EXPECT_EQ(table[1], "|---|---|---|---|---|");
  EXPECT_EQ(table[2].rfind("| tokens/s | ", 0), 0u) << table[2];
  EXPECT_EQ(table[3].rfind("| `embed.norm` | ", 0), 0u) << table[3];
  EXPECT_EQ(table[4].rfind("| `final_norm` | ", 0), 0u) << table[4];
  for (const std::string& row : table) {
    EXPECT_EQ(std::count(row.begin(), row.end(), '|'), 6) << row;
    EXPECT_EQ(row.back(), '|') << row;
  }
  // Each op's row ends in how many of the one pair B won: 0/1 or 1/1.
  for (size_t i = 2; i < table.size(); ++i) {
    EXPECT_TRUE(table[i].ends_with(" 0/1 |") || table[i].ends_with(" 1/1 |")) << table[i];
  }
  // Markdown instead of the aligned plain table, not beside it.
  EXPECT_EQ(r.out.find("op (self ms per run)  "), std::string::npos) << r.out;
}

TEST(AbProfile, RefusesWhatItCannotRun) {
  const std::string binary = NANOGPT_BINARY;
  CommandResult r = ab_profile("--a /no/such/nanogpt --b " + binary + kTinyTrain);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("--a /no/such/nanogpt: not an executable file"), std::string::npos) << r.err;
  r = ab_profile("--a " + binary + " --b " + binary + " --env-b NANOGPT_ISA" + kTinyTrain);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("give KEY=VALUE"), std::string::npos) << r.err;
  r = ab_profile("--a " + binary + " --b " + binary + " --pairs 0" + kTinyTrain);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("--pairs 0: give at least 1"), std::string::npos) << r.err;
  r = ab_profile("--a " + binary + " --b " + binary + " --pairs 1 --ops no_such_scope" +
                 kTinyTrain);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("--ops no_such_scope: no such profile scope"), std::string::npos) << r.err;
  // A run that fails: its command and the tail of its errors.
  r = ab_profile("--a " + binary + " --b " + binary + " --pairs 1 -- --config no_such_preset");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("exited with"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("no_such_preset"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace nanogpt
