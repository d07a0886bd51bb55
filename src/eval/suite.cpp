#include "eval/suite.hpp"

#include <algorithm>
#include <set>

#include "eval/json_fields.hpp"
#include "eval/task_registry.hpp"
#include "runtime/error.hpp"
#include "runtime/file_io.hpp"

namespace nanogpt {

namespace {

using Json = nlohmann::ordered_json;

const std::vector<std::string> kSuiteFields = {"name",       "description", "tokenizer",
                                               "generation", "evaluators",  "cases"};
const std::vector<std::string> kCaseFields = {"name",       "kind", "inputs",   "expected",
                                              "generation", "task", "metadata", "evaluators"};
const std::vector<std::string> kGenerationFields = {"stop", "max_tokens", "samples", "temperature",
                                                    "top_k"};
const std::vector<std::string> kTaskFields = {"instance", "level", "split"};
constexpr int64_t kMaxSamples = 1 << 20;
constexpr double kMaxTemperature = 100;

std::string suite_where(const std::string& path) {
  return "suite '" + (path.empty() ? std::string("(in memory)") : path) + "': ";
}

std::string case_where(const std::string& path, size_t index, const std::string& name) {
  return suite_where(path) + "case " + std::to_string(index) +
         (name.empty() ? std::string(" (unnamed)") : " '" + name + "'") + ": ";
}

// Generation settings: `base` overridden by the fields present in `j`.
GenerationSettings read_generation(const Json& j, const std::string& where,
                                   const GenerationSettings& base) {
  if (!j.is_object()) throw InputError(where + "field 'generation': must be an object");
  const JsonFields f(j, where, "generation.");
  f.only(kGenerationFields);
  GenerationSettings g = base;
  if (f.has("stop")) g.stop = f.strings("stop");
  if (f.has("max_tokens")) g.max_tokens = f.integer("max_tokens");
  if (f.has("samples")) g.samples = f.integer("samples");
  if (f.has("temperature")) {
    if (!f.at("temperature").is_number()) f.fail("temperature", "must be a number");
    g.temperature = f.at("temperature").get<double>();
  }
  if (f.has("top_k")) g.top_k = f.integer("top_k");
  return g;
}

std::vector<std::shared_ptr<const Evaluator>> read_evaluators(const JsonFields& f) {
  std::vector<std::shared_ptr<const Evaluator>> out;
  const Json& list = f.array("evaluators");
  for (size_t i = 0; i < list.size(); ++i) {
    out.push_back(
        make_evaluator(list[i], f.where(), f.prefix() + "evaluators[" + std::to_string(i) + "]"));
  }
  return out;
}

SuiteCase read_case(const Json& j, size_t index, const std::string& path,
                    const std::optional<GenerationSettings>& defaults) {
  std::string name;
  if (j.is_object() && j.contains("name") && j.at("name").is_string()) {
    name = j.at("name").get<std::string>();
  }
  const std::string where = case_where(path, index, name);
  if (!j.is_object())
    throw InputError(where + "field 'cases[" + std::to_string(index) + "]': must be an object");
  const JsonFields f(j, where, "");
  f.only(kCaseFields);
  SuiteCase c;
  c.name = f.nonempty_str("name");
  const std::string kind = f.str("kind");
  bool known_kind = false;
  std::vector<std::string> kinds;
  for (CaseKind k : all_case_kinds()) {
    kinds.emplace_back(case_kind_name(k));
    if (kind == case_kind_name(k)) {
      c.kind = k;
      known_kind = true;
    }
  }
  if (!known_kind) f.fail("kind", "unknown kind '" + kind + "' (known: " + join_names(kinds) + ")");

  const JsonFields in(f.object("inputs"), where, "inputs.");
  switch (c.kind) {
    case CaseKind::kText:
      in.only({"text"});
      c.text = in.str("text");
      if (f.has("expected")) f.fail("expected", "a text case has no expected output");
      break;
    case CaseKind::kChoice:
      in.only({"context", "choices"});
      c.context = in.str("context");
      c.choices = in.strings("choices");
      if (!f.has("expected")) {
        f.fail("expected", "is missing: a choice case needs the gold choice's index");
      }
      c.gold = f.integer("expected");
      break;
    case CaseKind::kGenerate:
      in.only({"prompt"});
      c.prompt = in.str("prompt");
      if (f.has("expected")) {
        const Json& e = f.at("expected");
        if (e.is_string()) {
          c.expected = e.get<std::string>();
        } else if (e.is_number()) {
          c.expected = e.dump();
        } else {
          f.fail("expected", "must be a string or a number");
        }
      }
      break;
  }
  if (f.has("generation")) {
    if (c.kind != CaseKind::kGenerate) f.fail("generation", "only generate cases generate");
    c.generation =
        read_generation(f.at("generation"), where, defaults.value_or(GenerationSettings{}));
  } else if (defaults) {
    c.generation = *defaults;
  }
  if (f.has("task")) {
    if (c.kind != CaseKind::kGenerate) f.fail("task", "only generate cases have a task");
    const JsonFields t(f.object("task"), where, "task.");
    t.only(kTaskFields);
    const std::string instance = t.nonempty_str("instance");
    const int64_t level = t.integer("level");
    if (level < 1 || level > 1000) t.fail("level", "must be a level of the task (1, 2, ...)");
    try {
      c.task = task_from_canonical(instance, static_cast<int>(level));
    } catch (const InputError& e) {
      t.fail("instance", e.what());
    }
    if (t.has("split")) {
      TaskSplit split;
      try {
        split = parse_task_split(t.str("split"));
      } catch (const InputError& e) {
        t.fail("split", e.what());
      }
      if (split != c.task->split) {
        t.fail("split", "the instance '" + instance + "' is in the " +
                            std::string(task_split_name(c.task->split)) + " split, not " +
                            t.str("split"));
      }
    }
  }
  if (f.has("metadata")) c.metadata = f.object("metadata");
  if (f.has("evaluators")) c.evaluators = read_evaluators(f);
  return c;
}

void check_generation(const GenerationSettings& g, const std::string& where,
                      const std::string& field) {
  for (const std::string& s : g.stop) {
    if (s.empty()) throw InputError(where + "field '" + field + ".stop': a stop string is empty");
  }
  if (g.max_tokens < 0) {
    throw InputError(where + "field '" + field + ".max_tokens': must be >= 1 (or absent)");
  }
  if (g.samples < 1 || g.samples > kMaxSamples) {
    throw InputError(where + "field '" + field + ".samples': must be in 1.." +
                     std::to_string(kMaxSamples) + ", not " + std::to_string(g.samples));
  }
  if (!(g.temperature >= 0 && g.temperature <= kMaxTemperature)) {
    throw InputError(where + "field '" + field + ".temperature': must be in [0, " +
                     std::to_string(static_cast<int>(kMaxTemperature)) + "] (0 is greedy)");
  }
  if (g.top_k < 0) {
    throw InputError(where + "field '" + field + ".top_k': must be >= 0 (0: all tokens)");
  }
}

void check_case(const Suite& suite, const SuiteCase& c, size_t index) {
  const std::string where = case_where(suite.path, index, c.name);
  const auto fail = [&](const std::string& field, const std::string& what) {
    throw InputError(where + "field '" + field + "': " + what);
  };
  if (c.name.empty()) fail("name", "must not be empty");
  switch (c.kind) {
    case CaseKind::kText:
      if (c.text.empty()) fail("inputs.text", "must not be empty (bits per byte needs bytes)");
      break;
    case CaseKind::kChoice:
      if (c.choices.size() < 2) {
        fail("inputs.choices",
             "a choice case needs at least 2 choices, got " + std::to_string(c.choices.size()));
      }
      for (size_t i = 0; i < c.choices.size(); ++i) {
        if (c.choices[i].empty()) {
          fail("inputs.choices",
               "choice " + std::to_string(i) + " is empty (acc_norm divides by its length)");
        }
      }
      if (c.gold < 0 || c.gold >= static_cast<int64_t>(c.choices.size())) {
        fail("expected", "the gold index " + std::to_string(c.gold) + " is not in 0.." +
                             std::to_string(c.choices.size() - 1));
      }
      break;
    case CaseKind::kGenerate:
      check_generation(c.generation, where, "generation");
      if (c.generation.stop.empty() && c.generation.max_tokens == 0) {
        fail("generation",
             "a generate case needs stop strings or max_tokens (give "
             "\"generation\": {\"stop\": [\"\\n\"]} or {\"max_tokens\": N}, here "
             "or at the suite level)");
      }
      if (c.generation.samples > 1 && c.generation.temperature == 0) {
        fail("generation.temperature",
             std::to_string(c.generation.samples) +
                 " samples at temperature 0 (greedy) would all be the same; set a temperature "
                 "above 0 or samples to 1");
      }
      break;
  }
  std::set<std::string> names;
  for (size_t i = 0; i < c.evaluators.size(); ++i) {
    const Evaluator& e = *c.evaluators[i];
    if (!e.accepts(c.kind)) {
      std::string kinds;
      for (CaseKind k : evaluator_case_kinds(e.type())) {
        kinds += (kinds.empty() ? "" : " or ") + std::string(case_kind_name(k));
      }
      fail("evaluators[" + std::to_string(i) + "]",
           "the " + std::string(e.type()) + " evaluator applies to " + kinds + " cases, not " +
               std::string(case_kind_name(c.kind)));
    }
  }
  const std::vector<const Evaluator*> all = suite.evaluators_for(c);
  if (all.empty()) {
    fail("evaluators", "the case has no evaluator (give one here or at the suite level; known: " +
                           join_names(evaluator_type_names()) + ")");
  }
  for (const Evaluator* e : all) {
    if (!names.insert(e->name()).second) {
      fail("evaluators", "two evaluators are named '" + e->name() +
                             "' (give one a \"name\"; the suite's apply to every case)");
    }
    if (const std::optional<CaseProblem> p = e->check_case(c)) fail(p->field, p->message);
  }
}

Json generation_json(const GenerationSettings& g) {
  Json j = Json::object();
  if (!g.stop.empty()) j["stop"] = g.stop;
  if (g.max_tokens > 0) j["max_tokens"] = g.max_tokens;
  j["samples"] = g.samples;
  j["temperature"] = g.temperature;
  j["top_k"] = g.top_k;
  return j;
}

Json evaluators_json(const std::vector<std::shared_ptr<const Evaluator>>& list) {
  Json j = Json::array();
  for (const auto& e : list) j.push_back(e->spec());
  return j;
}

}  // namespace

std::vector<const Evaluator*> Suite::evaluators_for(const SuiteCase& c) const {
  std::vector<const Evaluator*> out;
  for (const auto& e : evaluators) {
    if (e->accepts(c.kind)) out.push_back(e.get());
  }
  for (const auto& e : c.evaluators) out.push_back(e.get());
  return out;
}

std::vector<std::string> suite_field_names() {
  return kSuiteFields;
}

std::vector<std::string> suite_case_field_names() {
  return kCaseFields;
}

void validate_suite(const Suite& suite) {
  const std::string where = suite_where(suite.path);
  if (suite.name.empty()) throw InputError(where + "field 'name': must not be empty");
  if (suite.cases.empty()) {
    throw InputError(where + "field 'cases': the suite has no cases");
  }
  if (suite.generation) check_generation(*suite.generation, where, "generation");
  for (size_t i = 0; i < suite.evaluators.size(); ++i) {
    const Evaluator& e = *suite.evaluators[i];
    const bool used = std::any_of(suite.cases.begin(), suite.cases.end(),
                                  [&](const SuiteCase& c) { return e.accepts(c.kind); });
    if (!used) {
      std::string kinds;
      for (CaseKind k : evaluator_case_kinds(e.type())) {
        kinds += (kinds.empty() ? "" : " or ") + std::string(case_kind_name(k));
      }
      throw InputError(where + "field 'evaluators[" + std::to_string(i) + "]': the " +
                       std::string(e.type()) + " evaluator applies to " + kinds +
                       " cases and the suite has none");
    }
  }
  std::set<std::string> names;
  for (size_t i = 0; i < suite.cases.size(); ++i) {
    check_case(suite, suite.cases[i], i);
    if (!names.insert(suite.cases[i].name).second) {
      throw InputError(case_where(suite.path, i, suite.cases[i].name) +
                       "field 'name': another case has this name (reports match cases by name)");
    }
  }
}

Suite parse_suite(std::string_view text, const std::string& path) {
  const std::string where = suite_where(path);
  Json j;
  try {
    j = Json::parse(text.begin(), text.end());
  } catch (const nlohmann::json::parse_error& e) {
    throw InputError(where + "not valid JSON: " + std::string(e.what()));
  }
  if (!j.is_object()) throw InputError(where + "must be a JSON object with \"name\" and \"cases\"");
  const JsonFields f(j, where, "");
  f.only(kSuiteFields);
  Suite s;
  s.path = path;
  s.name = f.nonempty_str("name");
  s.description = f.optional_str("description");
  s.tokenizer = f.optional_str("tokenizer");
  if (f.has("generation")) {
    s.generation = read_generation(f.at("generation"), where, GenerationSettings{});
  }
  if (f.has("evaluators")) s.evaluators = read_evaluators(f);
  const Json& cases = f.array("cases");
  for (size_t i = 0; i < cases.size(); ++i) {
    s.cases.push_back(read_case(cases[i], i, path, s.generation));
  }
  validate_suite(s);
  return s;
}

Suite load_suite(const std::string& path) {
  if (!file_exists(path)) {
    throw InputError("suite '" + path +
                     "' does not exist (make one with `nanogpt evals "
                     "make-suite`, or see docs/eval_suite.schema.json)");
  }
  return parse_suite(read_file(path), path);
}

std::string suite_json(const Suite& suite) {
  Json j;
  j["name"] = suite.name;
  if (!suite.description.empty()) j["description"] = suite.description;
  if (!suite.tokenizer.empty()) j["tokenizer"] = suite.tokenizer;
  if (suite.generation) j["generation"] = generation_json(*suite.generation);
  if (!suite.evaluators.empty()) j["evaluators"] = evaluators_json(suite.evaluators);
  Json cases = Json::array();
  for (const SuiteCase& c : suite.cases) {
    Json k;
    k["name"] = c.name;
    k["kind"] = case_kind_name(c.kind);
    switch (c.kind) {
      case CaseKind::kText:
        k["inputs"] = {{"text", c.text}};
        break;
      case CaseKind::kChoice:
        k["inputs"] = {{"context", c.context}, {"choices", c.choices}};
        k["expected"] = c.gold;
        break;
      case CaseKind::kGenerate:
        k["inputs"] = {{"prompt", c.prompt}};
        if (c.expected) k["expected"] = *c.expected;
        k["generation"] = generation_json(c.generation);
        if (c.task) {
          k["task"] = {{"instance", c.task->canonical},
                       {"level", c.task->level},
                       {"split", task_split_name(c.task->split)}};
        }
        break;
    }
    if (!c.metadata.empty()) k["metadata"] = c.metadata;
    if (!c.evaluators.empty()) k["evaluators"] = evaluators_json(c.evaluators);
    cases.push_back(std::move(k));
  }
  j["cases"] = std::move(cases);
  return j.dump(2) + "\n";
}

void save_suite(const Suite& suite, const std::string& path) {
  validate_suite(suite);
  write_file_atomic(path, suite_json(suite));
}

}  // namespace nanogpt
