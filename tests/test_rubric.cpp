// Rubric rewards (eval/rubric*, eval/fortune_rubric): each check on crafted responses, met and
// not; the weighted aggregate against hand-computed values, a pitfall and the clamp included;
// rubrics without a positive weight refused; every load error naming the file and JSON path; the
// loader and docs/rubric.schema.json agreeing on fields, and the built-in rubric and the fixture
// valid under the schema; the judge path with a test double (one batched call) and with a micro
// model (P(Yes) = the softmax of the scorer's two log-likelihoods); rates before and after; the
// responses file; the CLI, with a checkpoint as judge.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <functional>
#include <map>
#include <set>
#include <string>

#include "config/config.hpp"
#include "eval/fortune_rubric.hpp"
#include "eval/model_scorer.hpp"
#include "eval/rubric.hpp"
#include "eval/rubric_check.hpp"
#include "eval/rubric_judge.hpp"
#include "eval/rubric_rates.hpp"
#include "eval/rubric_responses.hpp"
#include "eval/rubric_score.hpp"
#include "eval/task_registry.hpp"
#include "model/model_io.hpp"
#include "runtime/error.hpp"
#include "runtime/file_io.hpp"
#include "support/fixtures.hpp"
#include "support/input_error.hpp"
#include "support/json_schema.hpp"
#include "support/micro_cli_checkpoint.hpp"
#include "support/micro_tokenizer.hpp"
#include "support/model.hpp"
#include "train/attention_window.hpp"

namespace nanogpt {
namespace {

using Json = nlohmann::ordered_json;

Json fixture() {
  return Json::parse(read_file(source_path("tests/data/rubric_every_check.json")));
}

Rubric parse(const Json& j, const std::string& path = "r.json") {
  return parse_rubric(j.dump(), path);
}

// A rubric of one prompt with these criteria.
Rubric rubric_of(const Json& criteria, const std::string& prompt = "Tell me a fortune.") {
  return parse(Json{
      {"name", "t"}, {"criteria", criteria}, {"prompts", {{{"name", "p"}, {"prompt", prompt}}}}});
}

Json criterion(const std::string& name, const std::string& cls, const Json& check) {
  return Json{{"name", name}, {"description", "d " + name}, {"class", cls}, {"check", check}};
}

CheckOutcome run(const Json& check, const std::string& response,
                 const std::string& prompt = "Tell me a fortune.") {
  const Rubric r = rubric_of(Json::array({criterion("c", "essential", check)}), prompt);
  return run_check(r.criteria[0].check, r.prompts[0], response);
}

bool met(const Json& check, const std::string& response,
         const std::string& prompt = "Tell me a fortune.") {
  const CheckOutcome o = run(check, response, prompt);
  EXPECT_EQ(o.score, o.satisfied ? 1.0 : 0.0) << o.reason;
  EXPECT_FALSE(o.reason.empty());
  return o.satisfied;
}

// ----- checks

TEST(RubricChecks, ContainsAnyAllCaseAndPrompt) {
  const Json any = {{"type", "contains"}, {"values", {"cat", "dog"}}};
  EXPECT_TRUE(met(any, "a dog barks"));
  EXPECT_FALSE(met(any, "a Dog barks"));
  EXPECT_FALSE(met(any, "a bird sings"));
  Json icase = any;
  icase["ignore_case"] = true;
  EXPECT_TRUE(met(icase, "a DOG barks"));
  Json all = any;
  all["match"] = "all";
  EXPECT_FALSE(met(all, "a dog barks"));
  EXPECT_TRUE(met(all, "a dog chases a cat"));
  EXPECT_NE(run(all, "a dog barks").reason.find("lacks 'cat'"), std::string::npos);
  const Json echo = {{"type", "contains"}, {"include_prompt", true}};
  EXPECT_TRUE(met(echo, "Sure. Tell me a fortune. No.", "Tell me a fortune."));
  EXPECT_FALSE(met(echo, "Tell me a fortune", "Tell me a fortune."));
}

TEST(RubricChecks, RegexOnAnyLineOrTheLastAndIgnoringCase) {
  const Json end = {{"type", "regex"}, {"pattern", "[.!?]$"}};
  EXPECT_TRUE(met(end, "One.\nTwo"));  // any line
  Json last = end;
  last["lines"] = "last";
  EXPECT_FALSE(met(last, "One.\nTwo"));
  EXPECT_TRUE(met(last, "One\nTwo!\n  \n"));  // blank lines after the last one do not count
  EXPECT_FALSE(met(last, ""));
  const Json word = {{"type", "regex"}, {"pattern", "\\bcats?\\b"}};
  EXPECT_TRUE(met(word, "my cat"));
  EXPECT_FALSE(met(word, "My Cat"));
  EXPECT_FALSE(met(word, "education"));
  Json icase = word;
  icase["ignore_case"] = true;
  EXPECT_TRUE(met(icase, "My CATS"));
}

TEST(RubricChecks, LengthInWordsAndCharacters) {
  const Json words = {{"type", "length"}, {"unit", "words"}, {"min", 3}, {"max", 5}};
  EXPECT_FALSE(met(words, "two words"));
  EXPECT_TRUE(met(words, "  three short words  "));
  EXPECT_TRUE(met(words, "one, two — three! four five"));  // the dash is no word
  EXPECT_FALSE(met(words, "one two three four five six"));
  EXPECT_EQ(response_words("Hello, world — ok!"),
            (std::vector<std::string>{"Hello", "world", "ok"}));
  // Apostrophes and decimal points inside a word stay; quotes, Unicode spaces (U+2003) and an
  // invalid byte (0xFF) separate or are trimmed.
  EXPECT_EQ(response_words("don't\tstop: 3.5 -- \xC2\xABquoted\xC2\xBB\xE2\x80\x83"
                           "caf\xC3\xA9\xFF"),
            (std::vector<std::string>{"don't", "stop", "3.5", "quoted", "caf\xC3\xA9"}));
  // Characters are Unicode code points of the trimmed response: "héllo" is 5.
  const Json chars = {{"type", "length"}, {"unit", "characters"}, {"max", 5}};
  EXPECT_TRUE(met(chars, " h\xC3\xA9llo\n"));
  EXPECT_FALSE(met(chars, "h\xC3\xA9llos"));
  const Json at_least = {{"type", "length"}, {"min", 1}};
  EXPECT_FALSE(met(at_least, " \n "));
}

TEST(RubricChecks, NgramRepetitionFraction) {
  // "a b c a b c": 3-grams abc, bca, cab, abc — one of four repeats an earlier one.
  const std::vector<std::string> w = response_words("a b c A b c.");
  EXPECT_DOUBLE_EQ(repeated_ngram_fraction(w, 3), 0.25);
  EXPECT_DOUBLE_EQ(repeated_ngram_fraction(w, 1), 0.5);  // 3 of 6 words repeat
  EXPECT_DOUBLE_EQ(repeated_ngram_fraction(w, 7), 0.0);  // fewer words than n
  // Words are joined unambiguously: "ab c" and "a bc" are different 2-grams.
  EXPECT_DOUBLE_EQ(repeated_ngram_fraction({"ab", "c", "a", "bc"}, 2), 0.0);
  const Json check = {{"type", "ngram_repetition"}, {"n", 3}, {"max_fraction", 0.25}};
  EXPECT_TRUE(met(check, "a b c a b c"));
  EXPECT_FALSE(met(check, "a b c a b c a"));  // abc bca cab abc bca: 2 of 5
  EXPECT_TRUE(met(check, "short"));
}

TEST(RubricChecks, NumericComparesTheLastNumber) {
  const Json check = {{"type", "numeric"}, {"value", 42}, {"tolerance", 0.5}};
  EXPECT_TRUE(met(check, "17 + 25 = 42"));
  EXPECT_TRUE(met(check, "about 42.4."));
  EXPECT_FALSE(met(check, "42, or maybe 43"));
  EXPECT_FALSE(met(check, "forty-two"));
  EXPECT_TRUE(met(check, "1,000 - 958 =\n42"));
  EXPECT_EQ(last_number("x 1,234.5 y"), 1234.5);
  EXPECT_FALSE(last_number("none").has_value());
}

TEST(RubricChecks, VerifierChecksThePromptsTask) {
  const Rubric r = parse(fixture());
  const RubricItem& add = *r.find_prompt("add");
  ASSERT_TRUE(add.task.has_value());
  EXPECT_EQ(add.task->canonical, "addition:17+25");
  EXPECT_EQ(add.task->level, 2);  // the lowest level it fits
  const Criterion& correct = add.criteria[0];
  const CheckOutcome right = run_check(correct.check, add, " 42\n");
  EXPECT_TRUE(right.satisfied);
  EXPECT_EQ(right.score, 1.0);
  const CheckOutcome wrong = run_check(correct.check, add, " 41");
  EXPECT_FALSE(wrong.satisfied);
  EXPECT_EQ(wrong.score, 0.0);
  EXPECT_EQ(wrong.reason.find(verify(*add.task, " 41").reason), 0u) << wrong.reason;
}

TEST(RubricChecks, JudgeOutcomeIsItsProbability) {
  EXPECT_TRUE(judge_check_outcome(0.5).satisfied);
  EXPECT_FALSE(judge_check_outcome(0.4999).satisfied);
  EXPECT_EQ(judge_check_outcome(0.8).score, 0.8);
  EXPECT_THROW(run_check(JudgeCheck{}, RubricItem{}, "x"), Error);
}

// ----- aggregate

// Essential 1.0, important 0.7, optional with weight 0.5 (overriding 0.3), pitfall -0.9: the
// positive weights sum to 2.2.
Rubric hand_rubric() {
  auto has = [](const char* word) { return Json{{"type", "contains"}, {"values", {word}}}; };
  Json ok = criterion("has-ok", "optional", has("ok"));
  ok["weight"] = 0.5;
  return rubric_of(Json::array({criterion("has-yes", "essential", has("yes")),
                                criterion("has-maybe", "important", has("maybe")), ok,
                                criterion("has-bad", "pitfall", has("bad"))}));
}

TEST(RubricScore, WeightedAggregateByHand) {
  const Rubric r = hand_rubric();
  EXPECT_DOUBLE_EQ(r.criteria[1].weight(), 0.7);
  EXPECT_DOUBLE_EQ(r.criteria[2].weight(), 0.5);
  EXPECT_DOUBLE_EQ(r.criteria[3].weight(), -0.9);
  const RubricItem& p = r.prompts[0];
  const RubricScore all = score(r, p, "yes maybe ok", nullptr);
  EXPECT_DOUBLE_EQ(all.reward, 1.0);
  // Essential and optional met, the pitfall made: (1 + 0.5 - 0.9) / 2.2.
  const RubricScore mixed = score(r, p, "yes ok bad", nullptr);
  EXPECT_NEAR(mixed.reward, 0.6 / 2.2, 1e-12);
  EXPECT_EQ(mixed.reward, mixed.unclamped);
  EXPECT_NE(mixed.reason.find("(1 + 0.5 - 0.9) / 2.2"), std::string::npos) << mixed.reason;
  EXPECT_EQ(mixed.reason.find("clamped"), std::string::npos);
  ASSERT_EQ(mixed.criteria.size(), 4u);
  EXPECT_EQ(mixed.criteria[0].criterion, "has-yes");
  EXPECT_TRUE(mixed.criteria[0].satisfied);
  EXPECT_FALSE(mixed.criteria[1].satisfied);
  EXPECT_EQ(mixed.criteria[2].weight, 0.5);
  EXPECT_TRUE(mixed.criteria[3].satisfied);  // the mistake was made
  EXPECT_EQ(mixed.criteria[3].weight_class, WeightClass::kPitfall);
  EXPECT_NEAR(score(r, p, "maybe", nullptr).reward, 0.7 / 2.2, 1e-12);
  // Only the pitfall: -0.9 / 2.2, clamped to 0 and said so.
  const RubricScore bad = score(r, p, "bad", nullptr);
  EXPECT_NEAR(bad.unclamped, -0.9 / 2.2, 1e-12);
  EXPECT_EQ(bad.reward, 0.0);
  EXPECT_NE(bad.reason.find("clamped to 0"), std::string::npos) << bad.reason;
  // The reward for reinforcement learning: the value and a reason per criterion.
  const Reward reward = rubric_reward(mixed);
  EXPECT_EQ(reward.value, mixed.reward);
  for (const char* part : {"has-yes: met", "has-maybe: not met", "has-bad: pitfall made"}) {
    EXPECT_NE(reward.reason.find(part), std::string::npos) << reward.reason;
  }
  EXPECT_NE(rubric_reward(all).reason.find("has-bad: pitfall avoided"), std::string::npos);
  const Json j = rubric_score_json(mixed);
  EXPECT_EQ(j["criteria"][3]["class"], "pitfall");
  EXPECT_EQ(j["reward"], mixed.reward);
}

TEST(RubricScore, AClampAboveOneCannotHappenButIsStated) {
  // Scores are in [0, 1] and only pitfalls are negative, so the aggregate never exceeds 1; the
  // clamp's upper side is exercised through aggregate_rubric with an out-of-contract score.
  CriterionOutcome o;
  o.weight = 1;
  o.score = 1.5;
  const RubricScore s = aggregate_rubric({o});
  EXPECT_EQ(s.reward, 1.0);
  EXPECT_NE(s.reason.find("clamped to 1"), std::string::npos) << s.reason;
}

TEST(RubricScore, DefaultWeightsAreRaRs) {
  EXPECT_EQ(default_weight(WeightClass::kEssential), 1.0);
  EXPECT_EQ(default_weight(WeightClass::kImportant), 0.7);
  EXPECT_EQ(default_weight(WeightClass::kOptional), 0.3);
  EXPECT_EQ(default_weight(WeightClass::kPitfall), -0.9);
}

// ----- loading

TEST(RubricLoad, NoPositiveWeightIsAnError) {
  const Json pitfall = criterion("bad", "pitfall", {{"type", "contains"}, {"values", {"x"}}});
  const std::string none = input_error([&] { rubric_of(Json::array({pitfall})); });
  EXPECT_NE(none.find("rubric 'r.json': field 'criteria'"), std::string::npos) << none;
  EXPECT_NE(none.find("no criterion has a positive weight"), std::string::npos) << none;
  // Explicit weight 0 is no positive weight either.
  Json zero = criterion("zero", "essential", {{"type", "contains"}, {"values", {"x"}}});
  zero["weight"] = 0;
  EXPECT_NE(input_error([&] {
              rubric_of(Json::array({pitfall, zero}));
            }).find("positive weight"),
            std::string::npos);
  // One prompt with a positive criterion of its own, another without: the second is refused.
  Json j = {
      {"name", "t"},
      {"criteria", {pitfall}},
      {"prompts",
       {{{"name", "a"},
         {"prompt", "A"},
         {"criteria", {criterion("good", "optional", {{"type", "contains"}, {"values", {"y"}}})}}},
        {{"name", "b"}, {"prompt", "B"}}}}};
  const std::string second = input_error([&] { parse(j); });
  EXPECT_NE(second.find("field 'prompts[1].criteria'"), std::string::npos) << second;
  EXPECT_NE(second.find("prompt 'b'"), std::string::npos) << second;
  j["prompts"][1]["criteria"] = j["prompts"][0]["criteria"];
  EXPECT_EQ(parse(j).prompts.size(), 2u);
}

TEST(RubricLoad, FixtureLoads) {
  const Rubric r = parse(fixture(), "every.json");
  EXPECT_EQ(r.name, "every-check");
  ASSERT_EQ(r.criteria.size(), 5u);
  ASSERT_EQ(r.prompts.size(), 2u);
  EXPECT_TRUE(rubric_uses_judge(r));
  std::set<std::string> types;
  for (const RubricItem& item : r.prompts) {
    for (const Criterion* c : r.criteria_for(item))
      types.insert(std::string(rubric_check_type(c->check)));
  }
  EXPECT_EQ(types.size(), rubric_check_type_names().size());
  EXPECT_EQ(r.criteria_for(r.prompts[1]).size(), 9u);
  EXPECT_EQ(r.find_prompt("nope"), nullptr);
  EXPECT_FALSE(rubric_uses_judge(builtin_fortune_rubric()));
}

template <class Edit>
std::string error_after(Edit edit) {
  Json j = fixture();
  edit(j);
  return input_error([&] { parse(j, "bad.json"); });
}

void expect_names(const std::string& error, const std::string& path) {
  EXPECT_NE(error.find("rubric 'bad.json': field '" + path + "': "), std::string::npos)
      << "expected field '" << path << "' in: " << error;
}

TEST(RubricLoad, EveryErrorNamesTheFileAndJsonPath) {
  const auto c = [](int i) -> std::string { return "criteria[" + std::to_string(i) + "]"; };
  const auto pc = [](int p, int i) {
    return "prompts[" + std::to_string(p) + "].criteria[" + std::to_string(i) + "]";
  };
  // Top level.
  expect_names(error_after([](Json& j) { j["version"] = 1; }), "version");
  expect_names(error_after([](Json& j) { j["name"] = ""; }), "name");
  expect_names(error_after([](Json& j) { j["name"] = 3; }), "name");
  expect_names(error_after([](Json& j) { j["criteria"] = "all"; }), "criteria");
  expect_names(error_after([](Json& j) { j["prompts"] = Json::array(); }), "prompts");
  expect_names(error_after([](Json& j) { j.erase("prompts"); }), "prompts");
  // Criteria.
  expect_names(error_after([](Json& j) { j["criteria"][0] = 3; }), c(0));
  expect_names(error_after([](Json& j) { j["criteria"][2]["colour"] = 1; }), c(2) + ".colour");
  expect_names(error_after([](Json& j) { j["criteria"][0]["name"] = ""; }), c(0) + ".name");
  expect_names(error_after([](Json& j) { j["criteria"][0].erase("description"); }),
               c(0) + ".description");
  expect_names(error_after([](Json& j) { j["criteria"][0]["class"] = "vital"; }), c(0) + ".class");
  expect_names(error_after([](Json& j) { j["criteria"][0]["weight"] = -1; }), c(0) + ".weight");
  expect_names(error_after([](Json& j) { j["criteria"][3]["weight"] = 0.5; }), c(3) + ".weight");
  expect_names(error_after([](Json& j) { j["criteria"][0]["weight"] = "heavy"; }),
               c(0) + ".weight");
  expect_names(error_after([](Json& j) { j["criteria"][1]["name"] = "short"; }), c(1) + ".name");
  // Checks.
  expect_names(error_after([](Json& j) { j["criteria"][0]["check"] = "length"; }), c(0) + ".check");
  expect_names(error_after([](Json& j) { j["criteria"][0]["check"]["type"] = "size"; }),
               c(0) + ".check.type");
  expect_names(error_after([](Json& j) { j["criteria"][0]["check"]["unit"] = "lines"; }),
               c(0) + ".check.unit");
  expect_names(error_after([](Json& j) { j["criteria"][0]["check"].erase("max"); }),
               c(0) + ".check");
  expect_names(error_after([](Json& j) { j["criteria"][0]["check"]["max"] = -1; }),
               c(0) + ".check.max");
  expect_names(error_after([](Json& j) { j["criteria"][0]["check"]["max"] = 2.5; }),
               c(0) + ".check.max");
  expect_names(error_after([](Json& j) { j["criteria"][1]["check"]["n"] = 0; }), c(1) + ".check.n");
  expect_names(error_after([](Json& j) { j["criteria"][1]["check"]["max_fraction"] = 1.5; }),
               c(1) + ".check.max_fraction");
  expect_names(error_after([](Json& j) { j["criteria"][2]["check"]["case"] = true; }),
               c(2) + ".check.case");
  expect_names(error_after([](Json& j) { j["criteria"][2]["check"]["values"][0] = ""; }),
               c(2) + ".check.values");
  expect_names(error_after([](Json& j) { j["criteria"][2]["check"]["ignore_case"] = "yes"; }),
               c(2) + ".check.ignore_case");
  const std::string regex =
      error_after([](Json& j) { j["criteria"][3]["check"]["pattern"] = "(unclosed"; });
  expect_names(regex, c(3) + ".check.pattern");
  EXPECT_NE(regex.find("not a valid ECMAScript regular expression"), std::string::npos);
  expect_names(error_after([](Json& j) { j["criteria"][4]["check"]["model"] = "big"; }),
               c(4) + ".check.model");
  // Prompts and their criteria.
  expect_names(error_after([](Json& j) { j["prompts"][0]["prompt"] = ""; }), "prompts[0].prompt");
  expect_names(error_after([](Json& j) { j["prompts"][1]["name"] = "add"; }), "prompts[1].name");
  expect_names(error_after([](Json& j) { j["prompts"][1]["extra"] = 1; }), "prompts[1].extra");
  expect_names(error_after([](Json& j) { j["prompts"][0]["task"] = "addition:x"; }),
               "prompts[0].task");
  const std::string family = error_after([](Json& j) { j["prompts"][0]["task"] = "nosuch:1"; });
  expect_names(family, "prompts[0].task");
  EXPECT_NE(family.find("addition"), std::string::npos) << family;  // lists the known families
  const std::string missing = error_after([](Json& j) { j["prompts"][0].erase("task"); });
  expect_names(missing, "prompts[0].task");
  EXPECT_NE(missing.find("criterion 'correct'"), std::string::npos) << missing;
  const std::string sort = generate_task("sort", 1, TaskSplit::kTrain, 0, 0).canonical;
  expect_names(error_after([&](Json& j) { j["prompts"][0]["task"] = sort; }), "prompts[0].task");
  expect_names(
      error_after([](Json& j) { j["prompts"][0]["criteria"][0]["check"]["task"] = "division"; }),
      pc(0, 0) + ".check.task");
  expect_names(
      error_after([](Json& j) { j["prompts"][0]["criteria"][0]["check"]["min_reward"] = 2; }),
      pc(0, 0) + ".check.min_reward");
  expect_names(
      error_after([](Json& j) { j["prompts"][0]["criteria"][1]["check"]["tolerance"] = -1; }),
      pc(0, 1) + ".check.tolerance");
  expect_names(error_after([](Json& j) { j["prompts"][0]["criteria"][1]["check"].erase("value"); }),
               pc(0, 1) + ".check.value");
  expect_names(
      error_after([](Json& j) { j["prompts"][1]["criteria"][0]["check"]["match"] = "some"; }),
      pc(1, 0) + ".check.match");
  expect_names(
      error_after([](Json& j) { j["prompts"][1]["criteria"][1]["check"]["lines"] = "first"; }),
      pc(1, 1) + ".check.lines");
  expect_names(error_after([](Json& j) { j["prompts"][1]["criteria"][2]["check"]["min"] = 100; }),
               pc(1, 2) + ".check.max");
  expect_names(
      error_after([](Json& j) { j["prompts"][1]["criteria"][3]["check"].erase("include_prompt"); }),
      pc(1, 3) + ".check.values");
  // A prompt's own criterion named as one of the rubric's.
  expect_names(error_after([](Json& j) { j["prompts"][1]["criteria"][0]["name"] = "short"; }),
               pc(1, 0) + ".name");
  // One name across prompts: another class, another weight.
  expect_names(error_after([](Json& j) { j["prompts"][1]["criteria"][2]["name"] = "last-number"; }),
               pc(1, 2) + ".class");
  expect_names(error_after([](Json& j) {
                 j["prompts"][1]["criteria"][1]["name"] = "last-number";
                 j["prompts"][1]["criteria"][1]["weight"] = 0.4;
               }),
               pc(1, 1) + ".weight");
  // Not JSON, not an object, no file.
  EXPECT_NE(input_error([] {
              parse_rubric("{\"name\": ", "bad.json");
            }).find("rubric 'bad.json': not valid JSON"),
            std::string::npos);
  EXPECT_NE(input_error([] { parse_rubric("[]", "bad.json"); }).find("rubric 'bad.json'"),
            std::string::npos);
  EXPECT_NE(input_error([] { load_rubric("/nonexistent/r.json"); }).find("does not exist"),
            std::string::npos);
}

TEST(RubricLoad, InMemoryRubricsAreValidatedAlike) {
  Rubric r = hand_rubric();
  r.path.clear();
  validate_rubric(r);
  r.criteria[0].check = RegexCheck{};  // not compiled
  const std::string e = input_error([&] { validate_rubric(r); });
  EXPECT_NE(e.find("rubric '(in memory)': field 'criteria[0].check.pattern'"), std::string::npos)
      << e;
  r.criteria[0].check = regex_check("yes", true);
  validate_rubric(r);
  EXPECT_NE(input_error([] { regex_check("[z-a]"); }).find("/[z-a]/"), std::string::npos);
}

// ----- schema

Json read_schema() {
  return Json::parse(read_file(source_path("docs/rubric.schema.json")));
}

std::set<std::string> keys(const Json& object) {
  std::set<std::string> out;
  for (const auto& item : object.items()) out.insert(item.key());
  return out;
}

template <class T>
std::set<std::string> as_set(const T& list) {
  std::set<std::string> out;
  for (const auto& x : list) out.insert(std::string(x));
  return out;
}

TEST(RubricSchema, LoaderAndSchemaAgreeOnFields) {
  const Json schema = read_schema();
  const Json& defs = schema["$defs"];
  EXPECT_EQ(keys(schema["properties"]), as_set(rubric_field_names()));
  EXPECT_EQ(keys(defs["prompt"]["properties"]), as_set(rubric_prompt_field_names()));
  EXPECT_EQ(keys(defs["criterion"]["properties"]), as_set(rubric_criterion_field_names()));
  std::set<std::string> classes;
  for (WeightClass c : all_weight_classes()) classes.insert(std::string(weight_class_name(c)));
  EXPECT_EQ(as_set(defs["criterion"]["properties"]["class"]["enum"]), classes);
  EXPECT_EQ(keys(defs["checks"]), as_set(rubric_check_type_names()));
  EXPECT_EQ(defs["check"]["oneOf"].size(), rubric_check_type_names().size());
  for (const std::string& t : rubric_check_type_names()) {
    std::set<std::string> options = keys(defs["checks"][t]["properties"]);
    options.erase("type");
    EXPECT_EQ(options, as_set(rubric_check_option_names(t))) << t;
    EXPECT_EQ(defs["checks"][t]["properties"]["type"]["const"], t);
  }
  EXPECT_EQ(as_set(defs["checks"]["verifier"]["properties"]["task"]["enum"]),
            as_set(task_family_names()));
}

// Where the fixture has a criterion of each check type.
std::map<std::string, std::vector<std::string>> fixture_check_at() {
  return {{"length", {"criteria", "0"}},
          {"ngram_repetition", {"criteria", "1"}},
          {"contains", {"criteria", "2"}},
          {"regex", {"criteria", "3"}},
          {"judge", {"criteria", "4"}},
          {"verifier", {"prompts", "0", "criteria", "0"}},
          {"numeric", {"prompts", "0", "criteria", "1"}}};
}

Json& at_path(Json& j, const std::vector<std::string>& path) {
  Json* at = &j;
  for (const std::string& p : path) {
    at = at->is_array() ? &(*at)[static_cast<size_t>(std::stoul(p))] : &(*at)[p];
  }
  return *at;
}

std::string dotted(const std::vector<std::string>& path) {
  std::string out;
  for (const std::string& p : path) {
    if (std::isdigit(static_cast<unsigned char>(p[0]))) {
      out += "[" + p + "]";
    } else {
      out += (out.empty() ? "" : ".") + p;
    }
  }
  return out;
}

TEST(RubricSchema, BuiltInAndFixtureAreValidAndEachRequiredFieldIsRefusedByBoth) {
  const JsonSchemaValidator schema(read_schema());
  EXPECT_EQ(schema.violation(fixture()), "");
  EXPECT_EQ(schema.violation(Json::parse(builtin_fortune_rubric_json())), "");
  // The schema is not vacuous: the validator refuses what it should.
  Json bad = fixture();
  bad["criteria"][3]["weight"] = 0.5;  // a positive pitfall
  EXPECT_NE(schema.violation(bad), "");
  bad = fixture();
  bad["criteria"][0]["check"].erase("max");  // a length without bounds
  EXPECT_NE(schema.violation(bad), "");
  // Every required field, erased: the schema and the loader both refuse, the loader naming it.
  const Json s = read_schema();
  const auto both_refuse = [&](const std::function<void(Json&)>& edit, const std::string& path) {
    Json j = fixture();
    edit(j);
    EXPECT_NE(schema.violation(j), "") << path;
    expect_names(input_error([&] { parse(j, "bad.json"); }), path);
  };
  for (const Json& f : s["required"]) {
    const std::string k = f.get<std::string>();
    both_refuse([&](Json& j) { j.erase(k); }, k);
  }
  for (const Json& f : s["$defs"]["prompt"]["required"]) {
    const std::string k = f.get<std::string>();
    both_refuse([&](Json& j) { j["prompts"][1].erase(k); }, "prompts[1]." + k);
  }
  for (const Json& f : s["$defs"]["criterion"]["required"]) {
    const std::string k = f.get<std::string>();
    both_refuse([&](Json& j) { j["criteria"][1].erase(k); }, "criteria[1]." + k);
  }
  for (const auto& [type, path] : fixture_check_at()) {
    Json doc = fixture();
    ASSERT_EQ(at_path(doc, path)["check"]["type"], type);
    for (const Json& f : s["$defs"]["checks"][type]["required"]) {
      const std::string k = f.get<std::string>();
      both_refuse([&](Json& j) { at_path(j, path)["check"].erase(k); },
                  dotted(path) + ".check." + k);
    }
  }
}

// ----- judge

// A judge that answers from a table of criteria (the text after "Criterion: ") and records
// every call.
class FakeJudge final : public RubricJudge {
 public:
  std::map<std::string, double> p_by_criterion;
  std::vector<std::vector<std::string>> calls;

  double yes_probability(std::string_view prompt) override {
    const std::string p(prompt);
    return yes_probabilities(std::span<const std::string>(&p, 1))[0];
  }
  std::vector<double> yes_probabilities(std::span<const std::string> prompts) override {
    calls.emplace_back(prompts.begin(), prompts.end());
    std::vector<double> out;
    for (const std::string& p : prompts) {
      const size_t at = p.find("\nCriterion: ") + 12;
      out.push_back(p_by_criterion.at(p.substr(at, p.find('\n', at) - at)));
    }
    return out;
  }
};

TEST(RubricJudgeTest, PromptIsTheDocumentedOne) {
  EXPECT_EQ(judge_prompt("Q?", "R.", "C."),
            "Question: Q?\nResponse: R.\nCriterion: C.\nDoes the response satisfy the "
            "criterion? Answer:");
  EXPECT_EQ(yes_probability_from_logprobs(-1, -1), 0.5);
  EXPECT_NEAR(yes_probability_from_logprobs(std::log(0.3), std::log(0.1)), 0.75, 1e-12);
  EXPECT_EQ(yes_probability_from_logprobs(0, -2000), 1.0);  // no overflow, no NaN
  EXPECT_EQ(yes_probability_from_logprobs(-2000, 0), 0.0);
}

TEST(RubricJudgeTest, JudgeQuestionsOfABatchGoInOneCall) {
  const Json judged = criterion("helpful", "important", {{"type", "judge"}});
  Json leak = criterion("rude", "pitfall", {{"type", "judge"}});
  leak["description"] = "The response is rude.";
  const Rubric r = rubric_of(
      Json::array({criterion("any", "essential", {{"type", "length"}, {"min", 1}}), judged, leak}));
  FakeJudge judge;
  judge.p_by_criterion = {{"d helpful", 0.25}, {"The response is rude.", 0.5}};
  const std::vector<std::string> texts = {"one", "two", "three"};
  std::vector<RubricResponse> batch;
  for (const std::string& t : texts) batch.push_back({&r.prompts[0], t});
  const std::vector<RubricScore> scores = score_responses(r, batch, &judge);
  ASSERT_EQ(judge.calls.size(), 1u);  // 3 responses × 2 judge criteria, one call
  ASSERT_EQ(judge.calls[0].size(), 6u);
  EXPECT_EQ(judge.calls[0][0], judge_prompt("Tell me a fortune.", "one", "d helpful"));
  EXPECT_EQ(judge.calls[0][5],
            judge_prompt("Tell me a fortune.", "three", "The response is rude."));
  for (const RubricScore& s : scores) {
    ASSERT_EQ(s.criteria.size(), 3u);
    EXPECT_FALSE(s.criteria[1].satisfied);
    EXPECT_EQ(s.criteria[1].score, 0.25);
    EXPECT_TRUE(s.criteria[2].satisfied);  // p = 0.5: the mistake is judged made
    // (1 + 0.7·0.25 − 0.9·0.5) / 1.7
    EXPECT_NEAR(s.reward, (1 + 0.7 * 0.25 - 0.9 * 0.5) / 1.7, 1e-12);
    EXPECT_NE(s.reason.find("0.7×0.25"), std::string::npos) << s.reason;
  }
  // score() of one response equals its place in the batch, with one call of its own.
  const RubricScore one = score(r, r.prompts[0], "two", &judge);
  EXPECT_EQ(judge.calls.size(), 2u);
  EXPECT_EQ(one.reward, scores[1].reward);
  // No judge: an InputError naming the criterion and the fix, before anything is scored.
  const std::string e = input_error([&] { score(r, r.prompts[0], "x", nullptr); });
  EXPECT_NE(e.find("criterion 'helpful' is a judge check and no judge is configured"),
            std::string::npos)
      << e;
  EXPECT_NE(e.find("--judge"), std::string::npos) << e;
}

TEST(RubricJudgeTest, ModelJudgeIsTheSoftmaxOfTheScorersTwoLogLikelihoods) {
  const BpeTokenizer tok = micro_tokenizer();
  Config c = micro_config();
  c.precision = PrecisionSetting::kFp32;
  Gpt model(c);
  randomize(model, 21);
  ModelScorer scorer(model, 1);
  ModelJudge judge(scorer, tok);
  const std::vector<std::string> prompts = {
      judge_prompt("Tell me a fortune.", "A cat will find you.",
                   "The response mentions an animal."),
      judge_prompt("What is 2 + 2?", "4", "The answer is correct."),
      judge_prompt("Say hi.", "hello there, friend", "The response is rude.")};
  // Directly: the scorer's log-likelihoods of " Yes" and " No" after each prompt.
  ModelScorer direct(model, 1);
  std::vector<double> want;
  for (const std::string& p : prompts) {
    const std::vector<double> lp = direct.continuation_logprobs(
        tok.encode(p, false), {tok.encode(" Yes", false), tok.encode(" No", false)});
    EXPECT_NE(lp[0], lp[1]);
    want.push_back(std::exp(lp[0]) / (std::exp(lp[0]) + std::exp(lp[1])));
  }
  for (size_t i = 0; i < prompts.size(); ++i) {
    const double p = judge.yes_probability(prompts[i]);
    EXPECT_GT(p, 0.0);
    EXPECT_LT(p, 1.0);
    EXPECT_NEAR(p, want[i], 1e-12) << i;
  }
  // In batches (one scorer call, or two of at most two prompts): the same.
  const std::vector<double> batched = judge.yes_probabilities(prompts);
  ModelJudge pairs(scorer, tok, 2);
  const std::vector<double> in_pairs = pairs.yes_probabilities(prompts);
  // Segments of a batch get the rows they get alone (model_scorer.hpp); bound as the scorer's
  // own batch test bounds log-likelihoods, printed.
  double worst = 0;
  for (size_t i = 0; i < prompts.size(); ++i) {
    worst = std::max({worst, std::abs(batched[i] - want[i]), std::abs(in_pairs[i] - want[i])});
    EXPECT_NEAR(batched[i], want[i], 1e-6) << i;
    EXPECT_NEAR(in_pairs[i], want[i], 1e-6) << i;
  }
  std::printf("judge: batched P(Yes) differs from one at a time by at most %.2e\n", worst);
  // Through a rubric: a judge criterion scores the probability.
  const Rubric r =
      rubric_of(Json::array({criterion("mentions", "essential", {{"type", "judge"}})}));
  const RubricScore s = score(r, r.prompts[0], "A cat will find you.", &judge);
  EXPECT_NEAR(s.criteria[0].score,
              judge.yes_probability(
                  judge_prompt("Tell me a fortune.", "A cat will find you.", "d mentions")),
              1e-12);
  EXPECT_EQ(s.reward, s.criteria[0].score);
}

// ----- the built-in rubric

TEST(RubricBuiltin, FortuneAnswersScoreAsDesigned) {
  const Rubric r = builtin_fortune_rubric();
  EXPECT_EQ(r.name, "fortune-answers");
  ASSERT_GE(r.prompts.size(), 10u);
  const RubricItem& cats = *r.find_prompt("cats");
  EXPECT_EQ(cats.prompt, "Tell me a short fortune about cats.");
  for (const RubricItem& item : r.prompts) {
    ASSERT_EQ(item.criteria.size(), 1u);
    EXPECT_EQ(item.criteria[0].name, "mentions-topic");
  }
  const auto reward = [&](const std::string& response) {
    return score(r, cats, response, nullptr).reward;
  };
  EXPECT_EQ(reward("A cat will sit on your keyboard and bring you luck."), 1.0);
  // Off topic: 2.0 / 2.7.
  EXPECT_NEAR(reward("You will find money under the couch."), 2.0 / 2.7, 1e-12);
  // No final punctuation: 2.4 / 2.7.
  EXPECT_NEAR(reward("Your cat knows something you do not"), 2.4 / 2.7, 1e-12);
  // "cat" inside another word is no mention.
  EXPECT_NEAR(reward("Your education will pay off."), 2.0 / 2.7, 1e-12);
  // Continuing the prompt format: the pitfall, 0.9 / 2.7 less.
  EXPECT_NEAR(reward("A kitten brings joy.\nQuestion: Tell me more."), 1.8 / 2.7, 1e-12);
  EXPECT_NEAR(reward("Tell me a short fortune about cats. Cats rule."), 1.8 / 2.7, 1e-12);
  // Special-token text (and no final punctuation): 1.5 / 2.7.
  EXPECT_NEAR(reward("Cats nap. <|endoftext|>"), 1.5 / 2.7, 1e-12);
  // Too short (and so neither the topic nor anything else counts for much).
  EXPECT_NEAR(reward("Cats."), 1.7 / 2.7, 1e-12);
  // Repetitive: 12 words, 3-grams repeating.
  EXPECT_NEAR(reward("the cat is here the cat is here the cat is here."), 2.0 / 2.7, 1e-12);
}

// ----- rates and responses

TEST(RubricRatesTest, PerCriterionRatesBeforeAndAfter) {
  const Rubric r = hand_rubric();
  const RubricItem* p = &r.prompts[0];
  const auto scores_of = [&](const std::vector<std::string>& texts) {
    std::vector<RubricResponse> batch;
    for (const std::string& t : texts) batch.push_back({p, t});
    return score_responses(r, batch, nullptr);
  };
  const std::vector<std::string> before_texts = {"bad", "yes bad", "maybe", "no"};
  const std::vector<std::string> after_texts = {"yes maybe ok", "yes ok", "yes bad", "yes maybe"};
  const RubricRates before = rubric_rates(scores_of(before_texts));
  const RubricRates after = rubric_rates(scores_of(after_texts));
  ASSERT_EQ(after.criteria.size(), 4u);
  EXPECT_EQ(after.responses, 4);
  EXPECT_EQ(after.criteria[0].criterion, "has-yes");
  EXPECT_EQ(after.criteria[0].satisfied, 4);
  EXPECT_EQ(after.criteria[0].rate(), 1.0);
  EXPECT_EQ(before.criteria[0].rate(), 0.25);
  EXPECT_EQ(before.criteria[3].rate(), 0.5);  // the pitfall made by half
  EXPECT_EQ(after.criteria[3].rate(), 0.25);
  // Mean reward: (1 + 1.5/2.2 + 0.1/2.2 + 1.7/2.2) / 4, and its standard error.
  const std::vector<double> rewards = {1, 1.5 / 2.2, 0.1 / 2.2, 1.7 / 2.2};
  double mean = 0;
  for (double x : rewards) mean += x / 4;
  double var = 0;
  for (double x : rewards) var += (x - mean) * (x - mean) / 3;
  EXPECT_NEAR(after.mean_reward, mean, 1e-12);
  EXPECT_NEAR(after.reward_standard_error, std::sqrt(var / 4), 1e-12);
  const std::string table = rubric_rates_table(after, &before);
  for (const char* part : {"rate before", "has-yes", "0.250", "1.000", "+0.750", "has-bad",
                           "-0.250", "reward before", "reward after"}) {
    EXPECT_NE(table.find(part), std::string::npos) << part << "\n" << table;
  }
  EXPECT_NE(rubric_rates_table(after).find("mean score"), std::string::npos);
}

TEST(RubricResponsesTest, JsonLinesNameLineAndField) {
  const Rubric r = parse(fixture());
  const std::string text =
      "{\"prompt\": \"add\", \"response\": \" 42\"}\n\n{\"prompt\": \"greet\", \"response\": "
      "\"Hello, world!\"}\n";
  const std::vector<PromptResponse> rs = parse_rubric_responses(text, "r.jsonl", r);
  ASSERT_EQ(rs.size(), 2u);
  EXPECT_EQ(rs[1].prompt_item, r.find_prompt("greet"));
  EXPECT_EQ(rs[1].response, "Hello, world!");
  const auto error = [&](const std::string& t) {
    return input_error([&] { parse_rubric_responses(t, "r.jsonl", r); });
  };
  EXPECT_NE(error("{\"prompt\": \"add\"}\n{\"prompt\": \"x\", \"response\": \"\"}")
                .find("responses 'r.jsonl': line 1: field 'response': is missing"),
            std::string::npos);
  const std::string unknown_prompt = error("\n{\"prompt\": \"nope\", \"response\": \"\"}");
  EXPECT_NE(unknown_prompt.find("line 2: field 'prompt'"), std::string::npos) << unknown_prompt;
  EXPECT_NE(unknown_prompt.find("add, greet"), std::string::npos) << unknown_prompt;
  EXPECT_NE(error("{\"prompt\": \"add\", \"response\": \"\", \"step\": 3}")
                .find("line 1: field 'step': unknown field"),
            std::string::npos);
  EXPECT_NE(error("{\"prompt\": ").find("line 1: not valid JSON"), std::string::npos);
  EXPECT_NE(error("").find("no responses"), std::string::npos);
}

TEST(RubricCli, MakeRubricThenRatesBeforeAndAfter) {
  TempDir dir;
  const std::string d = dir.path();
  auto made = run_nanogpt("evals make-rubric --builtin fortune-answers --out " + d + "/r.json");
  ASSERT_EQ(made.exit_code, 0) << made.err;
  EXPECT_EQ(read_file(d + "/r.json"), builtin_fortune_rubric_json());
  write_file_atomic(d + "/before.jsonl",
                    "{\"prompt\": \"cats\", \"response\": \"Question: what\"}\n"
                    "{\"prompt\": \"love\", \"response\": \"money money money money\"}\n");
  write_file_atomic(d + "/after.jsonl",
                    "{\"prompt\": \"cats\", \"response\": \"A cat will bring you luck.\"}\n"
                    "{\"prompt\": \"love\", \"response\": \"Love finds you on a Tuesday.\"}\n");
  auto rated =
      run_nanogpt("evals rubric " + d + "/r.json --responses " + d + "/after.jsonl --before " + d +
                  "/before.jsonl --scores " + d + "/scores.jsonl");
  ASSERT_EQ(rated.exit_code, 0) << rated.err;
  for (const char* part :
       {"mentions-topic", "prompt-leak", "rate before", "rate after", "reward after:  1.0000"}) {
    EXPECT_NE(rated.out.find(part), std::string::npos) << part << "\n" << rated.out;
  }
  const std::string scores = read_file(d + "/scores.jsonl");
  EXPECT_EQ(Json::parse(scores.substr(0, scores.find('\n')))["reward"], 1.0);
  // Bad input names what is wrong.
  write_file_atomic(d + "/bad.jsonl", "{\"prompt\": \"dogs\", \"response\": \"x\"}\n");
  auto bad = run_nanogpt("evals rubric " + d + "/r.json --responses " + d + "/bad.jsonl");
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.err.find("line 1: field 'prompt'"), std::string::npos) << bad.err;
  auto judged = run_nanogpt("evals rubric " + source_path("tests/data/rubric_every_check.json") +
                            " --responses " + d + "/after.jsonl");
  EXPECT_NE(judged.exit_code, 0);
  EXPECT_NE(judged.err.find("--judge"), std::string::npos) << judged.err;
}

// The judge path end to end: a micro checkpoint trained here judges the fixture's judge
// criterion, and the scores file holds what a ModelJudge on the same checkpoint gives.
TEST(RubricCli, JudgeCheckpointJudgesTheJudgeCriteria) {
  TempDir dir;
  const std::string d = dir.path();
  std::string corpus;
  for (int i = 0; i < 40; ++i) {
    corpus +=
        "Question: is fortune " + std::to_string(i) + " kind? Answer: Yes, it says hello.\n%\n";
  }
  // A base model judges (no chat format): the tokenizer keeps micro_config's EOT at 299.
  ASSERT_NO_FATAL_FAILURE(make_micro_cli_checkpoint(d, corpus));
  write_file_atomic(d + "/r.jsonl",
                    "{\"prompt\": \"add\", \"response\": \" 42\"}\n"
                    "{\"prompt\": \"greet\", \"response\": \"Hello, world!\"}\n");
  const std::string rubric = source_path("tests/data/rubric_every_check.json");
  auto judged = run_nanogpt("evals rubric " + rubric + " --responses " + d + "/r.jsonl --judge " +
                            d + "/run --scores " + d + "/scores.jsonl");
  ASSERT_EQ(judged.exit_code, 0) << judged.err;
  EXPECT_NE(judged.out.find("helpful"), std::string::npos) << judged.out;
  const std::string lines = read_file(d + "/scores.jsonl");
  const Json first = Json::parse(lines.substr(0, lines.find('\n')));
  const Json& helpful = first["criteria"][4];
  ASSERT_EQ(helpful["name"], "helpful");
  // The same question asked of a ModelJudge on the checkpoint, in this process.
  const std::string ckpt = require_checkpoint(d + "/run");
  Gpt model(read_checkpoint_config(ckpt));
  load_model_weights(model, ckpt);
  const BpeTokenizer tok = BpeTokenizer::load(d + "/data/tokenizer.json");
  ModelScorer scorer(model, attention_window_at(model.config(), model.config().num_iterations));
  ModelJudge judge(scorer, tok);
  const Rubric r = load_rubric(rubric);
  const double p = judge.yes_probability(
      judge_prompt(r.find_prompt("add")->prompt, " 42", r.criteria[4].description));
  EXPECT_GT(p, 0.0);
  EXPECT_LT(p, 1.0);
  // fp32 and the same kernels: equal up to the thread count's summation order, if at all.
  EXPECT_NEAR(helpful["score"].get<double>(), p, 1e-9);
}

}  // namespace
}  // namespace nanogpt
