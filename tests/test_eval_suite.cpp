// Suites as files: a valid suite loads and round-trips byte for byte, the loader and the
// published JSON Schema agree on fields, and every malformed suite is an InputError naming the
// file, the case (index and name) and the field.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <string>

#include "eval/suite.hpp"
#include "eval/task_registry.hpp"
#include "eval/task_suite.hpp"
#include "runtime/error.hpp"
#include "runtime/file_io.hpp"
#include "runtime/random.hpp"
#include "support/fixtures.hpp"
#include "support/input_error.hpp"

namespace nanogpt {
namespace {

using Json = nlohmann::ordered_json;

Json valid_suite() {
  return Json::parse(R"({
    "name": "mixed",
    "description": "one case of each kind",
    "tokenizer": "gpt2",
    "generation": {"stop": ["\n"], "samples": 2, "temperature": 0.8},
    "evaluators": ["acc", "acc_norm", {"type": "max_duration", "seconds": 10}],
    "cases": [
      {"name": "doc", "kind": "text", "inputs": {"text": "Hello world."},
       "evaluators": ["loss", "bits_per_byte"]},
      {"name": "pick", "kind": "choice",
       "inputs": {"context": "The sky is", "choices": [" blue", " green", " loud"]},
       "expected": 0, "metadata": {"source": "hand"}},
      {"name": "add", "kind": "generate", "inputs": {"prompt": "Question: What is 17 + 25?\nAnswer:"},
       "expected": 42, "generation": {"max_tokens": 8},
       "task": {"instance": "addition:17+25", "level": 2},
       "evaluators": ["verifier", {"type": "numeric", "name": "num"}]}
    ]})");
}

Suite parse(const Json& j, const std::string& path = "suite.json") {
  return parse_suite(j.dump(), path);
}

TEST(EvalSuite, ValidSuiteLoads) {
  const Suite s = parse(valid_suite());
  EXPECT_EQ(s.name, "mixed");
  EXPECT_EQ(s.tokenizer, "gpt2");
  ASSERT_EQ(s.cases.size(), 3u);
  EXPECT_EQ(s.cases[0].kind, CaseKind::kText);
  EXPECT_EQ(s.cases[0].text, "Hello world.");
  EXPECT_EQ(s.cases[1].kind, CaseKind::kChoice);
  EXPECT_EQ(s.cases[1].choices.size(), 3u);
  EXPECT_EQ(s.cases[1].gold, 0);
  EXPECT_EQ(s.cases[1].metadata["source"], "hand");
  const SuiteCase& g = s.cases[2];
  EXPECT_EQ(g.kind, CaseKind::kGenerate);
  EXPECT_EQ(g.expected, "42");
  // Suite defaults, overridden field by field.
  EXPECT_EQ(g.generation.stop, std::vector<std::string>{"\n"});
  EXPECT_EQ(g.generation.max_tokens, 8);
  EXPECT_EQ(g.generation.samples, 2);
  EXPECT_EQ(g.generation.temperature, 0.8);
  EXPECT_EQ(g.generation.top_k, 0);
  ASSERT_TRUE(g.task.has_value());
  EXPECT_EQ(g.task->target, 42);
  // The suite's evaluators that accept the kind, then the case's.
  std::vector<std::string> names;
  for (const Evaluator* e : s.evaluators_for(s.cases[1])) names.push_back(e->name());
  EXPECT_EQ(names, (std::vector<std::string>{"acc", "acc_norm", "max_duration"}));
  names.clear();
  for (const Evaluator* e : s.evaluators_for(g)) names.push_back(e->name());
  EXPECT_EQ(names, (std::vector<std::string>{"max_duration", "verifier", "num"}));
  // The verifier and the numeric evaluator both pass the right answer.
  Observation o;
  o.output = " 42";
  for (const Evaluator* e : s.evaluators_for(g)) EXPECT_TRUE(e->evaluate(g, o).passed) << e->name();
}

TEST(EvalSuite, RoundTripIsByteIdentical) {
  TempDir dir;
  const std::string path = dir.path() + "/s.json";
  save_suite(parse(valid_suite()), path);
  const std::string first = read_file(path);
  const Suite again = load_suite(path);
  EXPECT_EQ(suite_json(again), first);
  EXPECT_EQ(again.cases[2].generation.samples, 2);
  EXPECT_EQ(again.cases[2].task->canonical, "addition:17+25");
}

// The suite with one change applied to its JSON.
template <class Edit>
std::string error_after(Edit edit) {
  Json j = valid_suite();
  edit(j);
  return input_error([&] { parse(j, "bad.json"); });
}

void expect_names(const std::string& error, const std::string& where, const std::string& field) {
  EXPECT_NE(error.find("suite 'bad.json'"), std::string::npos) << error;
  EXPECT_NE(error.find(where), std::string::npos) << error;
  EXPECT_NE(error.find("field '" + field + "'"), std::string::npos) << error;
}

TEST(EvalSuite, MalformedCasesNameFileCaseAndField) {
  expect_names(error_after([](Json& j) { j["cases"][1]["inputs"]["choices"] = {" blue"}; }),
               "case 1 'pick'", "inputs.choices");
  expect_names(error_after([](Json& j) { j["cases"][1]["expected"] = 3; }), "case 1 'pick'",
               "expected");
  expect_names(error_after([](Json& j) { j["cases"][1]["expected"] = -1; }), "case 1 'pick'",
               "expected");
  expect_names(error_after([](Json& j) { j["cases"][1].erase("expected"); }), "case 1 'pick'",
               "expected");
  expect_names(error_after([](Json& j) { j["cases"][1]["inputs"]["choices"][1] = ""; }),
               "case 1 'pick'", "inputs.choices");
  // A generate case without stop strings or max_tokens.
  const std::string no_limit = error_after([](Json& j) {
    j.erase("generation");
    j["cases"][2].erase("generation");
  });
  expect_names(no_limit, "case 2 'add'", "generation");
  EXPECT_NE(no_limit.find("stop strings or max_tokens"), std::string::npos);
  expect_names(error_after([](Json& j) { j["cases"][2]["generation"]["samples"] = 0; }),
               "case 2 'add'", "generation.samples");
  expect_names(error_after([](Json& j) { j["cases"][2]["generation"]["top_p"] = 1; }),
               "case 2 'add'", "generation.top_p");
  expect_names(error_after([](Json& j) { j["cases"][2]["generation"]["stop"] = {""}; }),
               "case 2 'add'", "generation.stop");
  expect_names(error_after([](Json& j) { j["cases"][2]["generation"]["temperature"] = 0; }),
               "case 2 'add'", "generation.temperature");
  expect_names(error_after([](Json& j) { j["cases"][2]["generation"]["temperature"] = -1; }),
               "case 2 'add'", "generation.temperature");
  expect_names(error_after([](Json& j) { j["cases"][2]["generation"]["top_k"] = -1; }),
               "case 2 'add'", "generation.top_k");
  // Unknown kinds, fields and inputs.
  expect_names(error_after([](Json& j) { j["cases"][0]["kind"] = "essay"; }), "case 0 'doc'",
               "kind");
  expect_names(error_after([](Json& j) { j["cases"][0]["input"] = Json::object(); }),
               "case 0 'doc'", "input");
  expect_names(error_after([](Json& j) { j["cases"][0]["inputs"]["prompt"] = "x"; }),
               "case 0 'doc'", "inputs.prompt");
  expect_names(error_after([](Json& j) { j["cases"][0]["inputs"]["text"] = ""; }), "case 0 'doc'",
               "inputs.text");
  expect_names(error_after([](Json& j) { j["cases"][0]["expected"] = "x"; }), "case 0 'doc'",
               "expected");
  expect_names(error_after([](Json& j) { j["cases"][2]["expected"] = Json::array(); }),
               "case 2 'add'", "expected");
  // Names: missing, empty, duplicate.
  expect_names(error_after([](Json& j) { j["cases"][1].erase("name"); }), "case 1 (unnamed)",
               "name");
  expect_names(error_after([](Json& j) { j["cases"][1]["name"] = "doc"; }), "case 1 'doc'", "name");
  // Tasks: not as the generator writes it, wrong split, wrong level, on another kind.
  expect_names(error_after([](Json& j) { j["cases"][2]["task"]["instance"] = "addition:x"; }),
               "case 2 'add'", "task.instance");
  const std::string split = error_after([](Json& j) {
    const TaskSplit s = task_split_of("addition:17+25");
    j["cases"][2]["task"]["split"] = s == TaskSplit::kTrain ? "test" : "train";
  });
  expect_names(split, "case 2 'add'", "task.split");
  expect_names(error_after([](Json& j) { j["cases"][2]["task"]["level"] = 10; }), "case 2 'add'",
               "task.instance");
  expect_names(error_after([](Json& j) { j["cases"][1]["task"] = j["cases"][2]["task"]; }),
               "case 1 'pick'", "task");
}

TEST(EvalSuite, EvaluatorErrorsNameCaseAndField) {
  const std::string unknown =
      error_after([](Json& j) { j["cases"][2]["evaluators"][0] = "rouge"; });
  expect_names(unknown, "case 2 'add'", "evaluators[0]");
  for (const std::string& t : evaluator_type_names()) {
    EXPECT_NE(unknown.find(t), std::string::npos) << t;
  }
  // A case-level evaluator for another kind.
  const std::string kind = error_after([](Json& j) { j["cases"][0]["evaluators"][0] = "acc"; });
  expect_names(kind, "case 0 'doc'", "evaluators[0]");
  EXPECT_NE(kind.find("applies to choice cases, not text"), std::string::npos) << kind;
  // exact_match without an expected output.
  expect_names(error_after([](Json& j) {
                 j["cases"][2].erase("expected");
                 j["cases"][2]["evaluators"] = {"exact_match"};
               }),
               "case 2 'add'", "expected");
  // A bad option, at suite level.
  const std::string option = error_after([](Json& j) {
    j["evaluators"][2] = {{"type", "max_duration"}, {"seconds", "ten"}};
  });
  EXPECT_NE(option.find("suite 'bad.json': field 'evaluators[2].seconds'"), std::string::npos)
      << option;
  // A suite-level evaluator no case can use.
  const std::string unused = error_after([](Json& j) {
    j["cases"].erase(0);  // no text case left
    j["evaluators"].push_back("perplexity");
  });
  EXPECT_NE(unused.find("field 'evaluators[3]'"), std::string::npos) << unused;
  EXPECT_NE(unused.find("the suite has none"), std::string::npos) << unused;
  // Two evaluators with one name.
  expect_names(error_after([](Json& j) { j["cases"][1]["evaluators"] = {"acc"}; }), "case 1 'pick'",
               "evaluators");
  // A case with no evaluator at all (the suite's max_duration would apply to it).
  const std::string none = error_after([](Json& j) {
    j["cases"][0].erase("evaluators");
    j["evaluators"].erase(2);
  });
  expect_names(none, "case 0 'doc'", "evaluators");
  EXPECT_NE(none.find("no evaluator"), std::string::npos);
}

TEST(EvalSuite, MalformedFilesNameTheFile) {
  EXPECT_NE(input_error([] {
              parse_suite("{\"name\": ", "bad.json");
            }).find("suite 'bad.json': not valid JSON"),
            std::string::npos);
  EXPECT_NE(input_error([] { parse_suite("[]", "bad.json"); }).find("suite 'bad.json'"),
            std::string::npos);
  expect_names(error_after([](Json& j) { j["version"] = 2; }), "", "version");
  expect_names(error_after([](Json& j) { j["cases"] = Json::array(); }), "", "cases");
  expect_names(error_after([](Json& j) { j["cases"] = "all"; }), "", "cases");
  expect_names(error_after([](Json& j) { j["name"] = ""; }), "", "name");
  expect_names(error_after([](Json& j) { j["generation"]["samples"] = -1; }), "",
               "generation.samples");
  EXPECT_NE(input_error([] { load_suite("/nonexistent/suite.json"); }).find("does not exist"),
            std::string::npos);
}

// Truncated or mutated suite files load or give an InputError naming the file, never another
// exception or a crash.
TEST(EvalSuite, MutatedFilesLoadOrGiveInputErrors) {
  const std::string text = valid_suite().dump();
  const std::string_view alphabet = "{}[]\",:0-9ax";
  Rng rng(4);
  int errors = 0;
  for (int trial = 0; trial < 3000; ++trial) {
    std::string t = text;
    const int edits = 1 + static_cast<int>(rng.next_u64() % 3);
    for (int e = 0; e < edits; ++e) {
      const size_t at = rng.next_u64() % t.size();
      switch (rng.next_u64() % 3) {
        case 0:
          t.erase(at, 1 + rng.next_u64() % 8);
          break;
        case 1:
          t.insert(at, 1, alphabet[rng.next_u64() % alphabet.size()]);
          break;
        default:
          t[at] = alphabet[rng.next_u64() % alphabet.size()];
          break;
      }
      if (t.empty()) t.push_back('{');
    }
    try {
      parse_suite(t, "m.json");
    } catch (const InputError& e) {
      ++errors;
      EXPECT_NE(std::string(e.what()).find("suite 'm.json'"), std::string::npos) << e.what();
    }
  }
  EXPECT_GT(errors, 2000);
}

Json read_schema() {
  return Json::parse(read_file(source_path("docs/eval_suite.schema.json")));
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

TEST(EvalSuite, LoaderAndSchemaAgreeOnFields) {
  const Json schema = read_schema();
  const Json& case_schema = schema["$defs"]["case"];
  EXPECT_EQ(keys(schema["properties"]), as_set(suite_field_names()));
  EXPECT_EQ(keys(case_schema["properties"]), as_set(suite_case_field_names()));
  std::set<std::string> kinds;
  for (CaseKind k : all_case_kinds()) kinds.insert(std::string(case_kind_name(k)));
  EXPECT_EQ(as_set(case_schema["properties"]["kind"]["enum"]), kinds);
  // Every evaluator type and its options.
  const Json& evaluators = schema["$defs"]["evaluators"];
  EXPECT_EQ(keys(evaluators), as_set(evaluator_type_names()));
  for (const std::string& t : evaluator_type_names()) {
    std::set<std::string> options = keys(evaluators[t]["properties"]);
    options.erase("type");
    options.erase("name");
    EXPECT_EQ(options, as_set(evaluator_option_names(t))) << t;
  }
  EXPECT_EQ(as_set(schema["$defs"]["evaluator"]["oneOf"][0]["enum"]),
            as_set(evaluator_type_names()));
  EXPECT_EQ(as_set(evaluators["verifier"]["properties"]["task"]["enum"]),
            as_set(task_family_names()));
}

TEST(EvalSuite, LoaderRefusesEachRequiredFieldOfTheSchema) {
  const Json schema = read_schema();
  const Json& required = schema["required"];
  ASSERT_FALSE(required.empty());
  for (const Json& field : required) {
    const std::string f = field.get<std::string>();
    expect_names(error_after([&](Json& j) { j.erase(f); }), "", f);
  }
  const Json& case_required = schema["$defs"]["case"]["required"];
  ASSERT_FALSE(case_required.empty());
  for (const Json& field : case_required) {
    const std::string f = field.get<std::string>();
    const std::string e = error_after([&](Json& j) { j["cases"][2].erase(f); });
    expect_names(e, f == "name" ? "case 2 (unnamed)" : "case 2 'add'", f);
  }
  // Per kind: the inputs each kind requires.
  for (const Json& rule : schema["$defs"]["case"]["allOf"]) {
    const std::string kind = rule["if"]["properties"]["kind"]["const"];
    const size_t index = kind == "text" ? 0 : kind == "choice" ? 1 : 2;
    for (const Json& field : rule["then"]["properties"]["inputs"]["required"]) {
      const std::string f = field.get<std::string>();
      const std::string e = error_after([&](Json& j) { j["cases"][index]["inputs"].erase(f); });
      expect_names(e, "case " + std::to_string(index), "inputs." + f);
    }
    if (rule["then"].contains("required")) {
      for (const Json& field : rule["then"]["required"]) {
        const std::string f = field.get<std::string>();
        expect_names(error_after([&](Json& j) { j["cases"][index].erase(f); }),
                     "case " + std::to_string(index), f);
      }
    }
  }
  // And the task's.
  for (const Json& field : schema["$defs"]["case"]["properties"]["task"]["required"]) {
    const std::string f = field.get<std::string>();
    expect_names(error_after([&](Json& j) { j["cases"][2]["task"].erase(f); }), "case 2 'add'",
                 "task." + f);
  }
}

TEST(EvalSuite, ValidateSuiteBuiltInMemory) {
  Suite s;
  s.name = "mem";
  SuiteCase c;
  c.name = std::string("g");
  c.kind = CaseKind::kGenerate;
  c.prompt = std::string("Q");
  c.task = generate_task("sort", 1, TaskSplit::kTest, 1, 0);
  c.evaluators.push_back(make_evaluator("verifier", "", "evaluators[0]"));
  s.cases.push_back(c);
  const std::string e = input_error([&] { validate_suite(s); });
  EXPECT_NE(e.find("suite '(in memory)': case 0 'g': field 'generation'"), std::string::npos) << e;
  s.cases[0].generation.stop = task_stop_strings();
  validate_suite(s);
  const Suite back = parse_suite(suite_json(s), "");
  EXPECT_EQ(suite_json(back), suite_json(s));
  EXPECT_EQ(back.cases[0].task->split, TaskSplit::kTest);
}

TEST(EvalSuite, TaskSuitesForEveryFamilyAndLevel) {
  for (const std::string& family : task_family_names()) {
    for (int level = 1; level <= task_family(family).levels(); ++level) {
      TaskSuiteOptions o;
      o.family = family;
      o.level = level;
      o.cases = 8;
      o.seed = 5;
      const Suite s = make_task_suite(o);
      SCOPED_TRACE(s.name);
      ASSERT_EQ(s.cases.size(), 8u);
      std::set<std::string> problems;
      for (const SuiteCase& c : s.cases) {
        ASSERT_TRUE(c.task.has_value());
        EXPECT_EQ(c.task->split, TaskSplit::kTest);
        EXPECT_TRUE(problems.insert(c.task->canonical).second);
        EXPECT_EQ(c.prompt.substr(c.prompt.size() - c.task->prompt.size()), c.task->prompt);
        Observation right, wrong;
        // Built piece by piece: GCC 12's -Wrestrict misfires on " " + std::string here.
        right.output.push_back(' ');
        right.output += c.expected.value_or("");
        right.output.push_back('\n');
        wrong.output = std::string(" 7, 7, 7, 7 + 1\n");
        for (const Evaluator* e : s.evaluators_for(c)) {
          EXPECT_TRUE(e->evaluate(c, right).passed) << c.name;
          EXPECT_FALSE(e->evaluate(c, wrong).passed) << c.name;
        }
      }
      // The file form loads back to the same bytes.
      const std::string text = suite_json(s);
      EXPECT_EQ(suite_json(parse_suite(text, "task.json")), text);
    }
  }
  TaskSuiteOptions too_many;
  too_many.family = "addition";
  too_many.level = 1;
  too_many.cases = 100;  // a quarter of the 100 one-digit sums are test problems
  EXPECT_NE(input_error([&] { make_task_suite(too_many); }).find("distinct test problems"),
            std::string::npos);
  too_many.allow_fewer = true;
  const Suite fewer = make_task_suite(too_many);
  EXPECT_GT(fewer.cases.size(), 5u);
  EXPECT_LT(fewer.cases.size(), 50u);
  too_many.level = 10;
  EXPECT_NE(input_error([&] { make_task_suite(too_many); }).find("levels 1..9"), std::string::npos);
}

TEST(EvalSuite, MakeSuiteCommand) {
  TempDir dir;
  const std::string out = dir.path() + "/sort.json";
  const CommandResult r = run_nanogpt(
      "evals make-suite --task sort --level 2 --cases 12 --shots 2 "
      "--samples 4 --temperature 0.7 --out " +
      out);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const Suite s = load_suite(out);
  EXPECT_EQ(s.cases.size(), 12u);
  EXPECT_EQ(s.cases[0].generation.samples, 4);
  EXPECT_EQ(s.cases[0].generation.temperature, 0.7);
  const CommandResult greedy =
      run_nanogpt("evals make-suite --task sort --cases 2 --samples 4 --out " + out);
  EXPECT_EQ(greedy.exit_code, 1);
  EXPECT_NE(greedy.err.find("temperature"), std::string::npos) << greedy.err;
  const CommandResult check = run_nanogpt("evals check " + out);
  EXPECT_EQ(check.exit_code, 0);
  EXPECT_NE(check.out.find("12 cases"), std::string::npos);
  const CommandResult all = run_nanogpt("evals make-suites --cases 3 --out-dir " + dir.path());
  ASSERT_EQ(all.exit_code, 0) << all.err;
  for (const std::string& family : task_family_names()) {
    for (int level = 1; level <= task_family(family).levels(); ++level) {
      const std::string path = dir.path() + "/" + family + "-l" + std::to_string(level) + ".json";
      EXPECT_EQ(load_suite(path).cases.size(), 3u) << path;
    }
  }
  const CommandResult bad = run_nanogpt("evals make-suite --task chess --out " + out);
  EXPECT_EQ(bad.exit_code, 1);
  EXPECT_NE(bad.err.find("unknown task 'chess'"), std::string::npos) << bad.err;
  write_file_atomic(dir.path() + "/bad.json", "{\"name\": \"x\", \"cases\": 3}");
  const CommandResult malformed = run_nanogpt("evals check " + dir.path() + "/bad.json");
  EXPECT_EQ(malformed.exit_code, 1);
  EXPECT_NE(malformed.err.find("field 'cases': must be an array"), std::string::npos)
      << malformed.err;
}

}  // namespace
}  // namespace nanogpt
