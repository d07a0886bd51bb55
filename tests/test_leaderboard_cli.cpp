// `nanogpt leaderboard` through the built binary: the submitter's commands never print a label
// or a private score, and bad input is an error that leaves the state file as it was.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "eval/eval_report.hpp"
#include "runtime/file_io.hpp"
#include "runtime/sha256.hpp"
#include "support/fixtures.hpp"
#include "support/micro_cli_checkpoint.hpp"

namespace nanogpt {
namespace {

// Labels no output could contain by accident: 7-digit class ids.
const std::string kLabelA = "9182736", kLabelB = "5647382";

struct CliBoard {
  TempDir dir;
  std::string holdout = dir.path() + "/labels.txt";
  std::string state = dir.path() + "/board.json";

  // 100 rows alternating between the two labels.
  CliBoard() {
    std::string text;
    for (int i = 0; i < 100; ++i) text += (i % 2 ? kLabelA : kLabelB) + "\n";
    write_file_atomic(holdout, text);
  }
  // A submission getting the first `wrong` rows wrong.
  std::string predictions(const std::string& name, int wrong, int rows = 100) {
    std::string text;
    for (int i = 0; i < rows; ++i) {
      text += (i < wrong ? std::string("1") : (i % 2 ? kLabelA : kLabelB)) + "\n";
    }
    const std::string path = dir.path() + "/" + name;
    write_file_atomic(path, text);
    return path;
  }
};

void expect_no_secret(const CommandResult& r, const std::string& what) {
  for (const std::string& secret : {kLabelA, kLabelB, std::string("0.33"), std::string("0.27")}) {
    EXPECT_EQ(r.out.find(secret), std::string::npos) << what << " printed " << secret << ":\n"
                                                     << r.out;
    EXPECT_EQ(r.err.find(secret), std::string::npos) << what << " printed " << secret << ":\n"
                                                     << r.err;
  }
}

TEST(LeaderboardCli, SubmitAndShowPrintPublicAnswersOnly) {
  CliBoard b;
  auto init = run_nanogpt("leaderboard init --holdout " + b.holdout +
                          " --mechanism ladder --eta 0.1 --state " + b.state);
  ASSERT_EQ(init.exit_code, 0) << init.err;
  // Private scores 0.33 and 0.27: the Ladder shows round(3.3) * 0.1 = 0.3 for the first, and
  // the second (0.06 better) is not shown at all.
  auto first = run_nanogpt("leaderboard submit --state " + b.state + " --predictions " +
                           b.predictions("first.txt", 33) + " --name first");
  ASSERT_EQ(first.exit_code, 0) << first.err;
  EXPECT_NE(first.out.find("public score 0.30000"), std::string::npos) << first.out;
  expect_no_secret(first, "submit");
  auto second = run_nanogpt("leaderboard submit --state " + b.state + " --predictions " +
                            b.predictions("second.txt", 27));
  ASSERT_EQ(second.exit_code, 0) << second.err;
  EXPECT_NE(second.out.find("public score 0.30000"), std::string::npos) << second.out;
  expect_no_secret(second, "submit");
  auto show = run_nanogpt("leaderboard show --state " + b.state);
  ASSERT_EQ(show.exit_code, 0) << show.err;
  EXPECT_NE(show.out.find("first"), std::string::npos) << show.out;
  EXPECT_NE(show.out.find("second.txt"), std::string::npos) << show.out;
  expect_no_secret(show, "show");
  // Errors quote neither labels nor scores either.
  auto wrong_row = run_nanogpt("leaderboard submit --state " + b.state + " --predictions " +
                               b.predictions("bad.txt", 0, 99));
  EXPECT_EQ(wrong_row.exit_code, 1);
  expect_no_secret(wrong_row, "a failed submit");
}

TEST(LeaderboardCli, WrongLengthOrCorruptStateIsAnErrorAndChangesNothing) {
  CliBoard b;
  ASSERT_EQ(run_nanogpt("leaderboard init --holdout " + b.holdout + " --mechanism kaggle --state " +
                        b.state)
                .exit_code,
            0);
  ASSERT_EQ(run_nanogpt("leaderboard submit --state " + b.state + " --predictions " +
                        b.predictions("ok.txt", 10))
                .exit_code,
            0);
  const std::string before = read_file(b.state);
  const std::string short_file = b.predictions("short.txt", 0, 98);
  auto r = run_nanogpt("leaderboard submit --state " + b.state + " --predictions " + short_file);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find(short_file), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("98 rows"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("100"), std::string::npos) << r.err;
  EXPECT_EQ(read_file(b.state), before);

  const std::string corrupt = before.substr(0, before.size() - 5);
  write_file_atomic(b.state, corrupt);
  for (const std::string& cmd :
       {"leaderboard show --state " + b.state,
        "leaderboard submit --state " + b.state + " --predictions " + b.dir.path() + "/ok.txt"}) {
    auto c = run_nanogpt(cmd);
    EXPECT_EQ(c.exit_code, 1) << cmd;
    EXPECT_NE(c.err.find(b.state), std::string::npos) << c.err;
    EXPECT_EQ(read_file(b.state), corrupt) << cmd;
  }
  // init never overwrites a board.
  auto again = run_nanogpt("leaderboard init --holdout " + b.holdout +
                           " --mechanism kaggle --state " + b.state);
  EXPECT_EQ(again.exit_code, 1);
  EXPECT_EQ(read_file(b.state), corrupt);
}

TEST(LeaderboardCli, ConcurrentSubmitsAreAllRecorded) {
  // Eight submits at once: without the lock, two that read the same state lose one answer.
  CliBoard b;
  ASSERT_EQ(run_nanogpt("leaderboard init --holdout " + b.holdout +
                        " --mechanism ladder-free --state " + b.state)
                .exit_code,
            0);
  // Appended piece by piece: GCC 12 warns falsely (-Wrestrict) on a chain of string +.
  std::string script;
  for (int i = 0; i < 8; ++i) {
    const std::string predictions = b.predictions(std::to_string(i) + ".txt", 40 - i);
    script.append(NANOGPT_BINARY).append(" leaderboard submit --state ").append(b.state);
    script.append(" --predictions ").append(predictions).append(" >/dev/null & ");
  }
  script.append("wait");
  ASSERT_EQ(std::system(script.c_str()), 0);
  const std::string state = read_file(b.state);
  EXPECT_NE(state.find("\"answered\": 8"), std::string::npos) << state.substr(0, 600);
  EXPECT_NE(state.find("\"number\": 8"), std::string::npos);
}

// A checkpoint submitted with a suite: each choice case's most likely choice (by `evals run`'s
// own log-likelihoods) is its row's class id, or on a brier board the probability of choice 1;
// the board scores those as it scores a file, records the checkpoint and the suite, and a suite
// that cannot make a submission is refused before the model runs, the state unchanged.
TEST(LeaderboardCli, CheckpointSubmissionsScoreTheSuitesMostLikelyChoices) {
  TempDir dir;
  const std::string d = dir.path();
  ASSERT_NO_FATAL_FAILURE(make_micro_cli_checkpoint(d, micro_fortunes_corpus()));
  // A kaggle board on `labels` (a file written first), with `options`.
  auto init_board = [&](const std::string& board, const std::string& labels,
                        const std::string& options) {
    write_file_atomic(d + "/" + board + "-labels.txt", labels);
    return run_nanogpt("leaderboard init --holdout " + d + "/" + board +
                       "-labels.txt --mechanism kaggle " + options + " --state " + d + "/" + board +
                       ".json")
        .exit_code;
  };
  ASSERT_EQ(run_nanogpt("evals make-suite --builtin fortunes-choice --cases 8 --data " + d +
                        "/data --out " + d + "/choice.json")
                .exit_code,
            0);
  // The same cases with two choices each, for a brier board.
  nlohmann::ordered_json two = nlohmann::ordered_json::parse(read_file(d + "/choice.json"));
  for (auto& c : two["cases"]) {
    auto& choices = c["inputs"]["choices"];
    choices = nlohmann::ordered_json::array({choices[0], choices[1]});
    c["expected"] = 0;
  }
  write_file_atomic(d + "/two.json", two.dump());
  std::vector<std::vector<double>> ll[2];
  for (int k = 0; k < 2; ++k) {
    const std::string name = k == 0 ? "choice" : "two";
    auto run = run_nanogpt("evals run " + d + "/" + name + ".json --checkpoint " + d +
                           "/run --quiet --report-json " + d + "/" + name + "-report.json");
    ASSERT_EQ(run.exit_code, 0) << run.err;
    for (const CaseRecord& c : parse_report(read_file(d + "/" + name + "-report.json"), name).cases)
      ll[k].push_back(c.samples.at(0).choice_logprobs);
  }
  const size_t n = ll[0].size();  // the held-out fortunes long enough to cut: at least 3
  ASSERT_GE(n, 3u);
  ASSERT_EQ(ll[1].size(), n);

  // zero-one: labels agree with the model's picks on every row but the last.
  std::string labels, picks;
  for (size_t i = 0; i < n; ++i) {
    size_t best = 0;
    for (size_t j = 1; j < ll[0][i].size(); ++j) best = ll[0][i][j] > ll[0][i][best] ? j : best;
    picks += std::to_string(best) + "\n";
    labels += std::to_string(i + 1 < n ? best : (best + 1) % ll[0][i].size()) + "\n";
  }
  ASSERT_EQ(init_board("board", labels, ""), 0);
  auto sub = run_nanogpt("leaderboard submit --state " + d + "/board.json --checkpoint " + d +
                         "/run --suite " + d + "/choice.json");
  ASSERT_EQ(sub.exit_code, 0) << sub.err;
  char want[64];
  std::snprintf(want, sizeof want, "public score %.5f", 1.0 / static_cast<double>(n));
  EXPECT_NE(sub.out.find(want), std::string::npos) << sub.out << " (want " << want << ")";
  const auto state = nlohmann::json::parse(read_file(d + "/board.json"));
  const auto& rec = state.at("submissions").at(0);
  EXPECT_NE(rec.at("file").get<std::string>().find(" on " + d + "/choice.json"), std::string::npos)
      << rec.dump();
  EXPECT_EQ(rec.at("sha256").get<std::string>(), sha256_hex(picks));

  // brier, all labels 1: the mean of (p_i - 1)^2 with p_i the probability of choice 1.
  std::string ones;
  for (size_t i = 0; i < n; ++i) ones += "1\n";
  ASSERT_EQ(init_board("board2", ones, "--loss brier"), 0);
  double brier = 0;
  for (const auto& pair : ll[1]) {
    const double p = 1.0 / (1.0 + std::exp(pair[0] - pair[1]));
    brier += (p - 1.0) * (p - 1.0) / static_cast<double>(n);
  }
  std::snprintf(want, sizeof want, "public score %.5f", brier);
  auto sub2 = run_nanogpt("leaderboard submit --state " + d + "/board2.json --checkpoint " + d +
                          "/run --suite " + d + "/two.json --name two");
  ASSERT_EQ(sub2.exit_code, 0) << sub2.err;
  EXPECT_NE(sub2.out.find(want), std::string::npos) << sub2.out << " (want " << want << ")";

  // Refused before the model runs, the state as it was: four choices on the brier board, a
  // suite of the wrong length, and no suite at all.
  const std::string before = read_file(d + "/board2.json");
  auto four = run_nanogpt("leaderboard submit --state " + d + "/board2.json --checkpoint " + d +
                          "/run --suite " + d + "/choice.json");
  EXPECT_NE(four.exit_code, 0);
  EXPECT_NE(four.err.find("has 4 choices; a brier board needs two"), std::string::npos) << four.err;
  ASSERT_EQ(init_board("board3", "0\n1\n", ""), 0);
  auto length = run_nanogpt("leaderboard submit --state " + d + "/board3.json --checkpoint " + d +
                            "/run --suite " + d + "/choice.json");
  EXPECT_NE(length.exit_code, 0);
  EXPECT_NE(length.err.find("cases but the board's holdout has 2 rows"), std::string::npos)
      << length.err;
  auto no_suite =
      run_nanogpt("leaderboard submit --state " + d + "/board2.json --checkpoint " + d + "/run");
  EXPECT_NE(no_suite.exit_code, 0);
  EXPECT_EQ(read_file(d + "/board2.json"), before);
}

TEST(LeaderboardCli, AttackWritesTheTableTheJsonAndThePlot) {
  TempDir dir;
  auto r = run_nanogpt(
      "leaderboard attack --rows 500 --max-k 40 --k-step 20 --seeds 3 "
      "--bound-rows 200,400 --bound-seeds 2 --svg " +
      dir.path() + "/a.svg --json " + dir.path() + "/a.json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("ladder-free"), std::string::npos) << r.out;
  const std::string svg = read_file(dir.path() + "/a.svg");
  EXPECT_EQ(svg.rfind("<svg", 0), 0u);
  EXPECT_NE(svg.find("</svg>"), std::string::npos);
  EXPECT_NE(read_file(dir.path() + "/a.json").find("\"leaderboard_error\""), std::string::npos);
}

}  // namespace
}  // namespace nanogpt
