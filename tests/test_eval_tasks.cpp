// The task registry: every family's generator is deterministic, its reference answer verifies
// to 1, train and test are disjoint by construction, verifiers accept right answers in several
// formats and reject wrong ones, and prompts have the documented shape.
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "eval/task_countdown.hpp"
#include "eval/task_registry.hpp"
#include "runtime/error.hpp"
#include "support/input_error.hpp"

namespace nanogpt {
namespace {

TEST(EvalTasks, EveryFamilyIsDeterministicAndItsAnswerVerifies) {
  for (const std::string& name : task_family_names()) {
    const TaskFamily& family = task_family(name);
    for (int level = 1; level <= family.levels(); ++level) {
      for (TaskSplit split : {TaskSplit::kTrain, TaskSplit::kTest}) {
        for (uint64_t index = 0; index < 20; ++index) {
          const TaskInstance a = generate_task(name, level, split, 7, index);
          const TaskInstance b = generate_task(name, level, split, 7, index);
          SCOPED_TRACE(name + " level " + std::to_string(level) + " " + a.canonical);
          EXPECT_EQ(a.canonical, b.canonical);
          EXPECT_EQ(a.prompt, b.prompt);
          EXPECT_EQ(a.answer, b.answer);
          EXPECT_EQ(a.family, name);
          EXPECT_EQ(a.level, level);
          EXPECT_EQ(a.split, split);
          EXPECT_EQ(task_split_of(a.canonical), split);
          const Reward r = verify(a, " " + a.answer + "\n");
          EXPECT_EQ(r.value, 1.0) << r.reason;
          // The canonical text rebuilds the same problem.
          const TaskInstance c = task_from_canonical(a.canonical, level);
          EXPECT_EQ(c.question, a.question);
          EXPECT_EQ(c.split, split);
          EXPECT_EQ(verify(c, a.answer).value, 1.0);
        }
      }
    }
  }
}

TEST(EvalTasks, SeedsAndIndicesGiveDifferentProblems) {
  std::set<std::string> seen;
  for (uint64_t index = 0; index < 50; ++index) {
    seen.insert(generate_task("multiplication", 4, TaskSplit::kTrain, 1, index).canonical);
    seen.insert(generate_task("multiplication", 4, TaskSplit::kTrain, 2, index).canonical);
  }
  EXPECT_GE(seen.size(), 99u);  // 9000^2 problems: a repeat is a 10^-5 event
}

// Known values pin the generator, so a change to it (which would move problems between
// splits of existing suites' seeds) is noticed.
TEST(EvalTasks, GeneratorIsPinned) {
  const TaskInstance t = generate_task("addition", 3, TaskSplit::kTest, 123, 4);
  const TaskInstance again = task_from_canonical(t.canonical, 3);
  EXPECT_EQ(t.question, again.question);
  EXPECT_EQ(t.numbers.size(), 2u);
  EXPECT_GE(t.numbers[0], 100);
  EXPECT_LE(t.numbers[0], 999);
  EXPECT_EQ(t.target, t.numbers[0] + t.numbers[1]);
}

TEST(EvalTasks, TrainAndTestAreDisjointAndBothNonEmptyAtEveryLevel) {
  for (const std::string& name : task_family_names()) {
    const TaskFamily& family = task_family(name);
    for (int level = 1; level <= family.levels(); ++level) {
      std::set<std::string> train, test;
      for (uint64_t index = 0; index < 200; ++index) {
        train.insert(generate_task(name, level, TaskSplit::kTrain, 3, index).canonical);
        test.insert(generate_task(name, level, TaskSplit::kTest, 3, index).canonical);
      }
      for (const std::string& c : test) {
        EXPECT_EQ(train.count(c), 0u) << name << " level " << level << ": " << c;
      }
      EXPECT_GT(test.size(), 1u) << name << " level " << level;
    }
  }
}

TEST(EvalTasks, SplitIsAboutAQuarterTest) {
  // Over all 100 one-digit additions: the share of test problems is near 1/4
  // (binomial sd 4.3; the band is 4 sd).
  int test = 0;
  for (int a = 0; a < 10; ++a) {
    for (int b = 0; b < 10; ++b) {
      test += task_split_of("addition:" + std::to_string(a) + "+" + std::to_string(b)) ==
              TaskSplit::kTest;
    }
  }
  EXPECT_GE(test, 8);
  EXPECT_LE(test, 42);
}

TEST(EvalTasks, LevelsShapeTheProblems) {
  for (uint64_t i = 0; i < 30; ++i) {
    const TaskInstance a = generate_task("addition", 5, TaskSplit::kTrain, 1, i);
    EXPECT_GE(a.numbers[0], 10000);
    EXPECT_LE(a.numbers[1], 99999);
    const TaskInstance s = generate_task("sort", 4, TaskSplit::kTrain, 1, i);
    EXPECT_EQ(s.numbers.size(), 12u);
    const TaskInstance w = generate_task("letter_count", 3, TaskSplit::kTrain, 1, i);
    EXPECT_GE(w.word.size(), 10u);
    EXPECT_LE(w.word.size(), 15u);
    const TaskInstance c = generate_task("countdown", 4, TaskSplit::kTrain, 1, i);
    EXPECT_EQ(c.numbers.size(), 6u);
    EXPECT_GE(c.target, 100);
    EXPECT_LE(c.target, 999);
  }
}

TEST(EvalTasks, BadLevelsFamiliesAndCanonicalTextsAreInputErrors) {
  EXPECT_NE(input_error([] {
              generate_task("addition", 0, TaskSplit::kTrain, 1, 0);
            }).find("levels 1..9"),
            std::string::npos);
  EXPECT_NE(input_error([] {
              task_from_canonical("addition:1+2", 2);
            }).find("is not a level 2 problem (level 2: two 2-digit operands)"),
            std::string::npos);
  EXPECT_NE(input_error([] { task_from_canonical("sort:1,2", 1); }), "");
  EXPECT_NE(input_error([] { task_from_canonical("letter_count:a@ab", 1); }), "");
  EXPECT_NE(input_error([] { task_from_canonical("countdown:1,2,3=6", 1); }), "");  // target < 10
  EXPECT_EQ(task_from_canonical("countdown:1,2,9=18", 1).target, 18);
  const std::string unknown =
      input_error([] { generate_task("division", 1, TaskSplit::kTrain, 1, 0); });
  EXPECT_NE(unknown.find("unknown task 'division'"), std::string::npos);
  EXPECT_NE(unknown.find("countdown"), std::string::npos);
  EXPECT_NE(input_error([] { task_from_canonical("addition:1+x", 1); }).find("addition:1+x"),
            std::string::npos);
  EXPECT_NE(input_error([] { task_from_canonical("nofamily", 1); }).find("FAMILY:DATA"),
            std::string::npos);
  // Not as the generator writes it (leading zero).
  EXPECT_NE(input_error([] { task_from_canonical("addition:07+1", 1); }), "");
  EXPECT_NE(input_error([] { parse_task_split("validation"); }).find("train or test"),
            std::string::npos);
}

TaskInstance instance(const std::string& canonical, int level = 1) {
  return task_from_canonical(canonical, level);
}

TEST(EvalTasks, IntegerAnswersInSeveralFormats) {
  const TaskInstance t = instance("addition:1234+4321", 4);
  for (const char* ok :
       {"5555", " 5555\n", "Answer: 5555", "5,555", "5555.", "5555.0", "+5555",
        "5555\n\nQuestion: What is 1 + 1?\nAnswer: 2", "1234 + 4321 is\nAnswer: 5555"}) {
    EXPECT_EQ(verify(t, ok).value, 1.0) << ok << ": " << verify(t, ok).reason;
  }
  for (const char* bad : {"5556", "55,55", "5555.5", "5555 or 5556", "five", "", "\n\n", "-5555",
                          "55 55", "99999999999999999999999"}) {
    const Reward r = verify(t, bad);
    EXPECT_EQ(r.value, 0.0) << bad;
    EXPECT_FALSE(r.reason.empty());
  }
  EXPECT_NE(verify(t, "5556").reason.find("expected 5555, got 5556"), std::string::npos);
  const TaskInstance m = instance("multiplication:12*34", 2);
  EXPECT_EQ(verify(m, "408").value, 1.0);
  EXPECT_EQ(verify(m, "46").value, 0.0);
}

TEST(EvalTasks, ListAnswersInSeveralFormats) {
  const TaskInstance s = instance("sort:5,3,9,3,0", 2);
  EXPECT_EQ(s.answer, "0, 3, 3, 5, 9");
  for (const char* ok :
       {"0, 3, 3, 5, 9", "[0, 3, 3, 5, 9]", "0 3 3 5 9", "(0,3,3,5,9)", "0, 3,3, 5 9"}) {
    EXPECT_EQ(verify(s, ok).value, 1.0) << ok;
  }
  for (const char* bad : {"0, 3, 5, 9", "0, 3, 3, 9, 5", "0, 3, 3, 5, 9, 9", "0, 3,,3,5,9",
                          "0, 3, 3, 5, 9,", "[0, 3, 3, 5, 9", "0; 3; 3; 5; 9", "three"}) {
    EXPECT_EQ(verify(s, bad).value, 0.0) << bad;
  }
  EXPECT_NE(verify(s, "0, 3, 3, 9, 5").reason.find("value 4 is 9, expected 5"), std::string::npos);
  const TaskInstance r = instance("reverse:5,3,9", 1);
  EXPECT_EQ(r.answer, "9, 3, 5");
  EXPECT_EQ(verify(r, "[9, 3, 5]").value, 1.0);
  EXPECT_EQ(verify(r, "3, 5, 9").value, 0.0);
}

TEST(EvalTasks, LetterCount) {
  const TaskInstance t = instance("letter_count:r@strawberry", 2);
  EXPECT_EQ(t.target, 3);
  EXPECT_EQ(t.question, "How many times does the letter \"r\" appear in \"strawberry\"?");
  EXPECT_EQ(verify(t, "3").value, 1.0);
  EXPECT_EQ(verify(t, "Answer: 3.").value, 1.0);
  EXPECT_EQ(verify(t, "2").value, 0.0);
  EXPECT_EQ(instance("letter_count:z@banana").target, 0);
}

TEST(EvalTasks, CountdownVerifier) {
  // Up to 5 numbers, a parsed problem's reference answer is found by search.
  const TaskInstance five = instance("countdown:3,7,9,10,25=175", 3);
  EXPECT_FALSE(five.answer.empty());
  EXPECT_EQ(verify(five, five.answer).value, 1.0) << five.answer;
  const TaskInstance t = instance("countdown:1,3,7,10,25,50=175", 4);
  for (const char* ok : {"7 * 25", "25 * 7 = 175", "(50 + 25) * 7 / 3", "50 × 3 + 25", "7x25",
                         "(((7))) * ((25))", "Answer: 7*25"}) {
    EXPECT_EQ(verify(t, ok).value, 1.0) << ok << ": " << verify(t, ok).reason;
  }
  EXPECT_EQ(verify(t, "(3+50)*(25/7) ...").value, 0.0);
  // "(3 + 4) * 25": 4 is not given.
  EXPECT_NE(verify(t, "(3 + 4) * 25").reason.find("4 is not one of the numbers"),
            std::string::npos);
  EXPECT_EQ(verify(t, "(3 + 4) * 25").value, 0.0);
  EXPECT_NE(verify(t, "7 * 25 + 7 - 7").reason.find("used more times"), std::string::npos);
  EXPECT_NE(verify(t, "7 * 25 = 176").reason.find("claims"), std::string::npos);
  EXPECT_NE(verify(t, "50 / (7 - 7)").reason, "");
  EXPECT_EQ(verify(t, "-3 + 178").value, 0.0);
  EXPECT_NE(verify(t, "7 * 25 + 3").reason.find("178"), std::string::npos);
  EXPECT_EQ(verify(t, std::string(2000, '(')).value, 0.0);
}

TEST(EvalTasks, CountdownExpressionsAreExact) {
  const CountdownExpression e = evaluate_countdown_expression("(1 / 3) * 3 + 2 * (10 - 4) / 4");
  ASSERT_TRUE(e.value.has_value()) << e.error;
  EXPECT_EQ(e.value->num, 4);
  EXPECT_EQ(e.value->den, 1);
  EXPECT_EQ(e.literals, (std::vector<int64_t>{1, 3, 3, 2, 10, 4, 4}));
  const CountdownExpression half = evaluate_countdown_expression("7 / 2 - 1");
  ASSERT_TRUE(half.value.has_value());
  EXPECT_EQ(half.value->num, 5);
  EXPECT_EQ(half.value->den, 2);
  EXPECT_FALSE(evaluate_countdown_expression("1 / 0").value.has_value());
  EXPECT_FALSE(evaluate_countdown_expression("(1 + 2").value.has_value());
  EXPECT_FALSE(evaluate_countdown_expression("1 + ").value.has_value());
  EXPECT_FALSE(evaluate_countdown_expression("9223372036854775807 * 2").value.has_value());
  EXPECT_FALSE(evaluate_countdown_expression("2 ^ 3").value.has_value());
  // Random expressions against a double evaluation of the same tree (error below 1e-9
  // relative: the values are small integers combined a few times).
  Rng rng(5);
  for (int trial = 0; trial < 200; ++trial) {
    std::string text = std::to_string(1 + rng.next_u64() % 9);
    double value = static_cast<double>(text[0] - '0');
    for (int k = 0; k < 4; ++k) {
      const int64_t n = 1 + static_cast<int64_t>(rng.next_u64() % 9);
      const char op = "+-*/"[rng.next_u64() % 4];
      text = "(" + text + ") " + op + " " + std::to_string(n);
      const double d = static_cast<double>(n);
      value = op == '+' ? value + d : op == '-' ? value - d : op == '*' ? value * d : value / d;
    }
    const CountdownExpression r = evaluate_countdown_expression(text);
    ASSERT_TRUE(r.value.has_value()) << text;
    const double got = static_cast<double>(r.value->num) / static_cast<double>(r.value->den);
    EXPECT_NEAR(got, value, 1e-9 * std::max(1.0, std::abs(value))) << text;
  }
}

TEST(EvalTasks, PromptsHaveTheDocumentedShape) {
  const TaskInstance t = generate_task("addition", 2, TaskSplit::kTest, 1, 0);
  EXPECT_EQ(t.prompt, "Question: " + t.question + "\nAnswer:");
  const std::string p = few_shot_prompt(t, 3, 42);
  EXPECT_EQ(p, few_shot_prompt(t, 3, 42));
  EXPECT_NE(p, few_shot_prompt(t, 3, 43));
  EXPECT_EQ(p.substr(p.size() - t.prompt.size()), t.prompt);
  // Three solved examples, each a train problem whose answer verifies.
  size_t pos = 0;
  int examples = 0;
  while ((pos = p.find("Question: ", pos)) != std::string::npos) {
    const size_t end = p.find("\n\n", pos);
    if (end == std::string::npos) break;
    const std::string block = p.substr(pos, end - pos);
    const std::string question = block.substr(10, block.find('\n') - 10);
    EXPECT_NE(question, t.question);
    const std::string answer = block.substr(block.find("\nAnswer: ") + 9);
    EXPECT_EQ(std::to_string(std::stoll(question.substr(8)) +
                             std::stoll(question.substr(question.find('+') + 2))),
              answer);
    ++examples;
    pos = end;
  }
  EXPECT_EQ(examples, 3);
  EXPECT_EQ(few_shot_prompt(t, 0, 1), t.prompt);
  EXPECT_EQ(task_stop_strings(), std::vector<std::string>{"\n"});
}

// Random completions from an alphabet of digits, operators, separators and cue words: every
// verifier answers 0 or 1 with a reason and never throws.
TEST(EvalTasks, VerifiersSurviveRandomCompletions) {
  const std::vector<std::string> pieces = {
      "0", "1",        "7",       "25",          "99999999999999999999",
      "+", "-",        "*",       "/",           "x",
      "(", ")",        " ",       ",",           "[",
      "]", "\n",       "Answer:", "\nQuestion:", "=",
      ".", "\xC3\x97", "\xC3"};
  Rng rng(9);
  for (const std::string& name : task_family_names()) {
    const TaskInstance t = generate_task(name, 1, TaskSplit::kTest, 1, 0);
    for (int trial = 0; trial < 2000; ++trial) {
      std::string completion;
      const size_t n = rng.next_u64() % 24;
      for (size_t i = 0; i < n; ++i) completion += pieces[rng.next_u64() % pieces.size()];
      Reward r;
      ASSERT_NO_THROW(r = verify(t, completion)) << name << ": " << completion;
      EXPECT_TRUE(r.value == 0.0 || r.value == 1.0);
      EXPECT_FALSE(r.reason.empty());
    }
  }
}

TEST(EvalTasks, ExtractAnswer) {
  EXPECT_EQ(extract_answer(" 42\n"), "42");
  EXPECT_EQ(extract_answer("\n\n  42  \nmore"), "42");
  EXPECT_EQ(extract_answer(" 42\n\nQuestion: What is 1 + 2?\nAnswer: 3"), "42");
  EXPECT_EQ(extract_answer("Let me see. 40 + 2.\nAnswer: 42\nDone"), "42");
  EXPECT_EQ(extract_answer(""), "");
}

}  // namespace
}  // namespace nanogpt
