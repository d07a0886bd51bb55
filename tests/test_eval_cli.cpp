// `nanogpt evals run|compare|add-failures` and `make-suite --builtin` end to end on a micro
// checkpoint trained here with its own 300-token tokenizer: reports written (JSON that loads
// and writes back identically, Markdown), a report compared with itself changes nothing, failed
// cases become a regression suite, and bad input is an error naming what is wrong.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "eval/eval_report.hpp"
#include "eval/suite.hpp"
#include "runtime/file_io.hpp"
#include "support/fixtures.hpp"
#include "support/micro_cli_checkpoint.hpp"
#include "support/model.hpp"

namespace nanogpt {
namespace {

void expect_contains(const std::string& text, const std::string& part) {
  EXPECT_NE(text.find(part), std::string::npos) << "'" << part << "' missing from:\n" << text;
}

TEST(EvalCli, RunCompareAndAddFailuresOnAMicroCheckpoint) {
  TempDir dir;
  const std::string d = dir.path();
  ASSERT_NO_FATAL_FAILURE(make_micro_cli_checkpoint(d, micro_fortunes_corpus()));

  // Built-in suites from the held-out documents.
  auto bpb = run_nanogpt("evals make-suite --builtin fortunes-bpb --cases 6 --data " + d +
                         "/data --out " + d + "/bpb.json");
  ASSERT_EQ(bpb.exit_code, 0) << bpb.err;
  auto choice = run_nanogpt("evals make-suite --builtin fortunes-choice --cases 6 --data " + d +
                            "/data --out " + d + "/choice.json");
  ASSERT_EQ(choice.exit_code, 0) << choice.err;
  ASSERT_EQ(run_nanogpt("evals make-suite --task addition --level 2 --cases 4 --max-tokens 6 "
                        "--out " +
                        d + "/add.json")
                .exit_code,
            0);

  for (const std::string name : {"bpb", "choice", "add"}) {
    auto run = run_nanogpt("evals run " + d + "/" + name + ".json --checkpoint " + d +
                           "/run --threads 2 --report-json " + d + "/" + name +
                           "-report.json --report-md " + d + "/" + name + "-report.md");
    ASSERT_EQ(run.exit_code, 0) << run.err;
    expect_contains(run.out, "averages");
    const std::string json = read_file(d + "/" + name + "-report.json");
    EXPECT_EQ(report_json(parse_report(json, name)), json);
    expect_contains(read_file(d + "/" + name + "-report.md"), "| case |");
  }
  expect_contains(read_file(d + "/bpb-report.md"), "bits_per_byte");

  // A warm-up changes durations only: the completions of the run above, on one worker.
  auto warm = run_nanogpt("evals run " + d + "/add.json --checkpoint " + d +
                          "/run --warmup 2 --report-json " + d + "/add-warm.json");
  ASSERT_EQ(warm.exit_code, 0) << warm.err;
  const EvalReport before = parse_report(read_file(d + "/add-report.json"), "add");
  const EvalReport after = parse_report(read_file(d + "/add-warm.json"), "add-warm");
  ASSERT_EQ(after.cases.size(), before.cases.size());
  for (size_t i = 0; i < before.cases.size(); ++i) {
    ASSERT_EQ(after.cases[i].samples.size(), before.cases[i].samples.size());
    for (size_t s = 0; s < before.cases[i].samples.size(); ++s) {
      EXPECT_EQ(after.cases[i].samples[s].output, before.cases[i].samples[s].output);
    }
  }
  auto bad_warmup =
      run_nanogpt("evals run " + d + "/add.json --checkpoint " + d + "/run --warmup -1");
  EXPECT_NE(bad_warmup.exit_code, 0);
  expect_contains(bad_warmup.err, "--warmup");
  expect_contains(read_file(d + "/choice-report.md"), "acc_norm");

  // A report against itself: nothing changed, nothing significant.
  auto same =
      run_nanogpt("evals compare " + d + "/choice-report.json " + d + "/choice-report.json");
  ASSERT_EQ(same.exit_code, 0) << same.err;
  expect_contains(same.out, "changed cases (0)");
  expect_contains(same.out, "p=1");
  expect_contains(same.out, "10000 resamples");

  // A two-step model fails every addition: all four become the regression suite.
  auto failures = run_nanogpt("evals add-failures " + d + "/add-report.json " + d +
                              "/add.json --out " + d + "/add-failures.json");
  ASSERT_EQ(failures.exit_code, 0) << failures.err;
  const Suite kept = load_suite(d + "/add-failures.json");
  EXPECT_EQ(kept.cases.size(), 4u);
  EXPECT_EQ(kept.name, "addition-l2-test-failures");
  auto wrong = run_nanogpt("evals add-failures " + d + "/add-report.json " + d +
                           "/choice.json --out " + d + "/x.json");
  EXPECT_EQ(wrong.exit_code, 1);
  expect_contains(wrong.err, "fortunes-choice");

  // A suite written for another tokenizer, and a report that is not one.
  auto j = nlohmann::ordered_json::parse(read_file(d + "/choice.json"));
  j["tokenizer"] = std::string(64, 'a');
  write_file_atomic(d + "/other.json", j.dump());
  auto other = run_nanogpt("evals run " + d + "/other.json --checkpoint " + d + "/run");
  EXPECT_EQ(other.exit_code, 1);
  expect_contains(other.err, d + "/other.json");
  expect_contains(other.err, "'tokenizer'");
  auto not_report = run_nanogpt("evals compare " + d + "/choice.json " + d + "/choice-report.json");
  EXPECT_EQ(not_report.exit_code, 1);
  expect_contains(not_report.err, d + "/choice.json");
  auto missing = run_nanogpt("evals run " + d + "/choice.json --checkpoint " + d + "/nowhere");
  EXPECT_EQ(missing.exit_code, 1);
  expect_contains(missing.err, "nowhere");
}

}  // namespace
}  // namespace nanogpt
