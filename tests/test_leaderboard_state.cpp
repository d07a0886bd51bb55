// The leaderboard's files: the holdout and submissions (errors naming the file, the row and the
// counts, never a label), and the state file (round trip, atomic write, a corrupted or
// mismatching file is an error that changes nothing).
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "eval/holdout.hpp"
#include "eval/leaderboard_state.hpp"
#include "eval/submission.hpp"
#include "runtime/error.hpp"
#include "runtime/file_io.hpp"
#include "support/fixtures.hpp"
#include "support/input_error.hpp"

namespace nanogpt {
namespace {

std::string rows_text(const std::vector<std::string>& rows) {
  std::string s;
  for (const auto& r : rows) s += r + "\n";
  return s;
}

// The message of the InputError `fn` throws ("" if it throws none).
struct Board {
  TempDir dir;
  std::string holdout = dir.path() + "/labels.txt";
  std::string state_path = dir.path() + "/board.json";

  explicit Board(MechanismKind kind, LossKind loss = LossKind::kZeroOne) {
    write_file_atomic(holdout, rows_text({"1", "0", "1", "1", "0", "0", "1", "0", "1", "1"}));
    MechanismParams p;
    p.kind = kind;
    p.eta = 0.1;
    p.votes = 50;
    p.seed = 1234;
    save_leaderboard_state(new_leaderboard(load_holdout(holdout), loss, p), state_path);
  }
  std::string predictions(const std::string& name, const std::vector<std::string>& rows) {
    const std::string path = dir.path() + "/" + name;
    write_file_atomic(path, rows_text(rows));
    return path;
  }
  void submit(const std::string& path) {
    LeaderboardState s = load_leaderboard_state(state_path);
    submit_to_leaderboard(s, load_board_holdout(s, state_path), path, "sub",
                          "2026-01-01T00:00:00Z");
    save_leaderboard_state(s, state_path);
  }
};

const std::vector<std::string> kTwoWrong{"1", "0", "1", "1", "0", "0", "1", "0", "0", "0"};
const std::vector<std::string> kAllOnes(10, "1");

TEST(Holdout, LoadsLabelsAndRefusesBadRowsWithoutQuotingThem) {
  TempDir dir;
  const std::string path = dir.path() + "/h.txt";
  write_file_atomic(path, "0\r\n2\n1");  // CRLF and no final newline are fine
  const Holdout h = load_holdout(path);
  EXPECT_EQ(h.labels, (std::vector<int32_t>{0, 2, 1}));
  EXPECT_EQ(h.num_classes, 3);
  // Labels longer than the 6 random characters of the temporary directory's name, so a hit
  // can only come from the message quoting the row.
  for (const std::string bad :
       {"0\n-9182736\n", "0\n\n1\n", "0\n7.555555\n", "0\n7777777x\n", "0\n99999999999\n"}) {
    write_file_atomic(path, bad);
    const std::string msg = input_error([&] { load_holdout(path); });
    EXPECT_NE(msg.find(path), std::string::npos) << msg;
    EXPECT_NE(msg.find("row 2"), std::string::npos) << msg;
    for (const char* label : {"9182736", "7.555555", "7777777x", "99999999999"}) {
      EXPECT_EQ(msg.find(label), std::string::npos) << "a label in the message: " << msg;
    }
  }
  write_file_atomic(path, "");
  EXPECT_NE(input_error([&] { load_holdout(path); }).find("no rows"), std::string::npos);
}

TEST(Submission, ScoresZeroOneAndBrierAndNamesBadRows) {
  Board b(MechanismKind::kKaggle);
  const Holdout h = load_holdout(b.holdout);
  const ScoredSubmission s = score_submission(b.predictions("p", kTwoWrong), h, LossKind::kZeroOne);
  EXPECT_DOUBLE_EQ(s.mean_loss, 0.2);
  EXPECT_EQ(s.losses[8], 1.0);
  EXPECT_EQ(s.losses[0], 0.0);
  // Brier: (p - y)^2 per row; 0.5 everywhere gives 0.25, a 0/1 prediction its zero-one loss.
  const ScoredSubmission half = score_submission(
      b.predictions("q", std::vector<std::string>(10, "0.5")), h, LossKind::kBrier);
  EXPECT_DOUBLE_EQ(half.mean_loss, 0.25);
  EXPECT_DOUBLE_EQ(score_submission(b.predictions("r", kTwoWrong), h, LossKind::kBrier).mean_loss,
                   0.2);
  auto rows = kTwoWrong;
  rows[3] = "0.7";
  const std::string msg =
      input_error([&] { score_submission(b.predictions("bad", rows), h, LossKind::kZeroOne); });
  EXPECT_NE(msg.find("row 4"), std::string::npos) << msg;
  EXPECT_NE(msg.find("zero-one"), std::string::npos) << msg;
  rows[3] = "1.5";
  EXPECT_NE(input_error([&] {
              score_submission(b.predictions("bad", rows), h, LossKind::kBrier);
            }).find("row 4"),
            std::string::npos);
  // Brier needs a binary holdout.
  write_file_atomic(b.holdout, rows_text({"0", "2"}));
  EXPECT_THROW(check_loss_fits_holdout(LossKind::kBrier, load_holdout(b.holdout)), InputError);
}

TEST(LeaderboardState, RoundTripsByteForByte) {
  for (MechanismKind kind : {MechanismKind::kKaggle, MechanismKind::kLadder,
                             MechanismKind::kLadderFree, MechanismKind::kSubsample}) {
    Board b(kind);
    b.submit(b.predictions("a", kAllOnes));
    b.submit(b.predictions("b", kTwoWrong));
    const std::string text = read_file(b.state_path);
    const LeaderboardState s = load_leaderboard_state(b.state_path);
    EXPECT_EQ(leaderboard_state_json(s), text) << mechanism_name(kind);
    ASSERT_EQ(s.submissions.size(), 2u);
    EXPECT_DOUBLE_EQ(s.submissions[0].private_score, 0.4);
    EXPECT_DOUBLE_EQ(s.submissions[1].private_score, 0.2);
    EXPECT_EQ(s.memory.answered, 2);
    EXPECT_EQ(s.mechanism.seed, 1234u);
    EXPECT_EQ(s.holdout_sha256, load_holdout(b.holdout).sha256);
    EXPECT_EQ(s.memory.leader_losses.size(), kind == MechanismKind::kLadderFree ? 10u : 0u);
    if (kind == MechanismKind::kLadder) {
      EXPECT_NEAR(s.memory.shown, 0.2, 1e-12);  // 0.4, then 0.2 beats it by 0.2 > eta = 0.1
      EXPECT_TRUE(s.submissions[1].leads);
    }
    // Saving wrote through a temporary and renamed it: nothing else is left in the directory.
    int entries = 0;
    for (const auto& e : std::filesystem::directory_iterator(b.dir.path())) {
      entries += e.path().filename().string().find(kTempMarker) != std::string::npos;
    }
    EXPECT_EQ(entries, 0);
  }
}

TEST(LeaderboardState, CorruptedStateIsAnErrorNamingTheFieldAndChangesNothing) {
  Board b(MechanismKind::kLadderFree);
  b.submit(b.predictions("a", kAllOnes));
  const std::string good = read_file(b.state_path);
  struct Case {
    std::string from, to, field;
  };
  const std::vector<Case> cases = {
      {"\"answered\": 1", "\"answered\": 2", "board.answered"},
      {"\"format\": \"nanogpt-leaderboard\"", "\"format\": \"other\"", "format"},
      {"\"version\": 1", "\"version\": 9", "version"},
      {"\"name\": \"ladder-free\"", "\"name\": \"ladder-fre\"", "mechanism"},
      {"\"rows\": 10", "\"rows\": \"10\"", "holdout.rows"},
      {"\"number\": 1", "\"number\": 3", "submissions[0].number"},
      {"\"leads\": true", "\"leads\": 1", "submissions[0].leads"},
      {"\"has_leader\": true", "\"has_leader\": false", "board.leader_losses"},
  };
  for (const Case& c : cases) {
    std::string text = good;
    const size_t at = text.find(c.from);
    ASSERT_NE(at, std::string::npos) << c.from;
    text.replace(at, c.from.size(), c.to);
    write_file_atomic(b.state_path, text);
    const std::string msg = input_error([&] { load_leaderboard_state(b.state_path); });
    EXPECT_NE(msg.find(b.state_path), std::string::npos) << msg;
    EXPECT_NE(msg.find(c.field), std::string::npos) << "want '" << c.field << "' in: " << msg;
    // A submission against it fails the same way and leaves the file as it was.
    EXPECT_THROW(b.submit(b.predictions("x", kTwoWrong)), InputError);
    EXPECT_EQ(read_file(b.state_path), text);
  }
  for (const std::string& text :
       {good.substr(0, good.size() / 2), std::string(""), std::string("[]")}) {
    write_file_atomic(b.state_path, text);
    EXPECT_THROW(load_leaderboard_state(b.state_path), InputError);
    EXPECT_EQ(read_file(b.state_path), text);
  }
}

TEST(LeaderboardState, WrongLengthSubmissionIsAnErrorAndLeavesTheStateUnchanged) {
  Board b(MechanismKind::kLadder);
  b.submit(b.predictions("a", kAllOnes));
  const std::string before = read_file(b.state_path);
  LeaderboardState s = load_leaderboard_state(b.state_path);
  const Holdout h = load_board_holdout(s, b.state_path);
  const std::string shorter = b.predictions("short", {"1", "0", "1"});
  const std::string msg = input_error([&] { submit_to_leaderboard(s, h, shorter, "short", "t"); });
  EXPECT_NE(msg.find(shorter), std::string::npos) << msg;
  EXPECT_NE(msg.find("3 rows"), std::string::npos) << msg;
  EXPECT_NE(msg.find("has 10"), std::string::npos) << msg;
  EXPECT_EQ(leaderboard_state_json(s), before) << "the in-memory state changed";
  EXPECT_EQ(read_file(b.state_path), before);
}

TEST(LeaderboardState, AChangedHoldoutIsRefused) {
  Board b(MechanismKind::kKaggle);
  write_file_atomic(b.holdout, rows_text({"0", "0", "1", "1", "0", "0", "1", "0", "1", "1"}));
  const LeaderboardState s = load_leaderboard_state(b.state_path);
  const std::string msg = input_error([&] { load_board_holdout(s, b.state_path); });
  EXPECT_NE(msg.find("changed"), std::string::npos) << msg;
  std::filesystem::remove(b.holdout);
  EXPECT_NE(input_error([&] { load_board_holdout(s, b.state_path); }).find("missing"),
            std::string::npos);
}

}  // namespace
}  // namespace nanogpt
