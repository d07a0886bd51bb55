#include "eval/rubric.hpp"

#include <cmath>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "eval/json_fields.hpp"
#include "eval/task_registry.hpp"
#include "runtime/error.hpp"
#include "runtime/file_io.hpp"

namespace nanogpt {

namespace {

using Json = nlohmann::ordered_json;

const std::vector<std::string> kRubricFields = {"name", "description", "criteria", "prompts"};
const std::vector<std::string> kPromptFields = {"name", "prompt", "task", "criteria"};
const std::vector<std::string> kCriterionFields = {"name", "description", "class", "weight",
                                                   "check"};
// Longer n-grams say little about repetition in a short answer and cost memory per word.
constexpr int64_t kMaxNgram = 16;

struct CheckTypeInfo {
  std::string name;
  std::vector<std::string> options;
};

// In the order of the RubricCheck variant.
const std::vector<CheckTypeInfo>& check_types() {
  static const std::vector<CheckTypeInfo> table = {
      {"contains", {"values", "match", "ignore_case", "include_prompt"}},
      {"regex", {"pattern", "ignore_case", "lines"}},
      {"length", {"unit", "min", "max"}},
      {"ngram_repetition", {"n", "max_fraction"}},
      {"numeric", {"value", "tolerance"}},
      {"verifier", {"task", "min_reward"}},
      {"judge", {}},
  };
  return table;
}

std::string rubric_where(const std::string& path) {
  return "rubric '" + (path.empty() ? std::string("(in memory)") : path) + "': ";
}

std::string format_weight(double w) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", w);
  return buf;
}

std::vector<std::string> weight_class_names() {
  std::vector<std::string> names;
  for (WeightClass c : all_weight_classes()) names.emplace_back(weight_class_name(c));
  return names;
}

// The instance a canonical task text describes, at the lowest level it fits: a verifier's
// reward does not depend on the level, so a rubric does not ask for it.
TaskInstance task_from_text(const std::string& canonical) {
  const size_t colon = canonical.find(':');
  // Without a family, or not as the generator writes it: task_from_canonical says what is wrong.
  if (colon == std::string::npos) return task_from_canonical(canonical, 1);
  const TaskFamily& family = task_family(std::string_view(canonical).substr(0, colon));
  const std::optional<TaskInstance> parsed =
      family.parse(std::string_view(canonical).substr(colon + 1));
  if (!parsed || parsed->canonical != canonical) return task_from_canonical(canonical, 1);
  for (int level = 1; level <= family.levels(); ++level) {
    if (family.fits_level(*parsed, level)) return task_from_canonical(canonical, level);
  }
  throw InputError("task instance '" + canonical + "' fits no level of the " +
                   std::string(family.name()) + " family (levels 1.." +
                   std::to_string(family.levels()) + ")");
}

bool optional_bool(const JsonFields& f, const std::string& key) {
  return f.has(key) && f.boolean(key);
}

// Reads `check` of a criterion: types and known values; ranges are validate_rubric's.
RubricCheck read_check(const JsonFields& criterion) {
  const JsonFields f(criterion.object("check"), criterion.where(), criterion.prefix() + "check.");
  const std::string type = f.str("type");
  const std::vector<CheckTypeInfo>& types = check_types();
  size_t index = 0;
  while (index < types.size() && types[index].name != type) ++index;
  if (index == types.size()) {
    f.fail("type",
           "unknown check '" + type + "' (known: " + join_names(rubric_check_type_names()) + ")");
  }
  std::vector<std::string> known = {"type"};
  known.insert(known.end(), types[index].options.begin(), types[index].options.end());
  f.only(known);
  switch (index) {
    case 0: {
      ContainsCheck c;
      if (f.has("values")) c.values = f.strings("values");
      if (f.has("match")) {
        const std::string m = f.str("match");
        if (m != "any" && m != "all")
          f.fail("match", "must be \"any\" or \"all\", not '" + m + "'");
        c.match_all = m == "all";
      }
      c.ignore_case = optional_bool(f, "ignore_case");
      c.include_prompt = optional_bool(f, "include_prompt");
      return c;
    }
    case 1: {
      bool last = false;
      if (f.has("lines")) {
        const std::string l = f.str("lines");
        if (l != "any" && l != "last")
          f.fail("lines", "must be \"any\" or \"last\", not '" + l + "'");
        last = l == "last";
      }
      const std::string pattern = f.nonempty_str("pattern");
      try {
        return regex_check(pattern, optional_bool(f, "ignore_case"), last);
      } catch (const InputError& e) {
        f.fail("pattern", e.what());
      }
    }
    case 2: {
      LengthCheck c;
      if (f.has("unit")) {
        const std::string u = f.str("unit");
        if (u != "words" && u != "characters") {
          f.fail("unit", "must be \"words\" or \"characters\", not '" + u + "'");
        }
        c.unit = u == "words" ? LengthUnit::kWords : LengthUnit::kCharacters;
      }
      if (f.has("min")) c.min = f.integer("min");
      if (f.has("max")) c.max = f.integer("max");
      return c;
    }
    case 3: {
      NgramRepetitionCheck c;
      c.n = f.integer("n");
      c.max_fraction = f.number("max_fraction");
      return c;
    }
    case 4: {
      NumericCheck c;
      c.value = f.number("value");
      if (f.has("tolerance")) c.tolerance = f.number("tolerance");
      return c;
    }
    case 5: {
      VerifierCheck c;
      c.task = f.nonempty_str("task");
      if (f.has("min_reward")) c.min_reward = f.number("min_reward");
      return c;
    }
    default:
      return JudgeCheck{};
  }
}

Criterion read_criterion(const Json& j, const std::string& where, const std::string& path) {
  if (!j.is_object()) {
    throw InputError(where + "field '" + path +
                     "': must be an object with \"name\", \"description\", \"class\" and "
                     "\"check\"");
  }
  const JsonFields f(j, where, path + ".");
  f.only(kCriterionFields);
  Criterion c;
  c.name = f.str("name");
  c.description = f.str("description");
  const std::string cls = f.str("class");
  bool known = false;
  for (WeightClass w : all_weight_classes()) {
    if (cls == weight_class_name(w)) {
      c.weight_class = w;
      known = true;
    }
  }
  if (!known) {
    f.fail("class",
           "unknown weight class '" + cls + "' (known: " + join_names(weight_class_names()) + ")");
  }
  if (f.has("weight")) c.explicit_weight = f.number("weight");
  c.check = read_check(f);
  return c;
}

std::vector<Criterion> read_criteria(const JsonFields& f, const std::string& path) {
  std::vector<Criterion> out;
  const Json& list = f.array("criteria");
  for (size_t i = 0; i < list.size(); ++i) {
    out.push_back(read_criterion(list[i], f.where(), path + "[" + std::to_string(i) + "]"));
  }
  return out;
}

RubricItem read_prompt(const Json& j, const std::string& where, const std::string& path) {
  if (!j.is_object()) {
    throw InputError(where + "field '" + path +
                     "': must be an object with \"name\" and \"prompt\"");
  }
  const JsonFields f(j, where, path + ".");
  f.only(kPromptFields);
  RubricItem item;
  item.name = f.str("name");
  item.prompt = f.str("prompt");
  if (f.has("task")) {
    const std::string text = f.nonempty_str("task");
    try {
      item.task = task_from_text(text);
    } catch (const InputError& e) {
      f.fail("task", e.what());
    }
  }
  if (f.has("criteria")) item.criteria = read_criteria(f, path + ".criteria");
  return item;
}

// Throws an InputError "<where>field '<path>.<key>': <what>".
class FieldError {
 public:
  FieldError(std::string where, std::string path)
      : where_(std::move(where)), path_(std::move(path)) {}
  [[noreturn]] void operator()(const std::string& key, const std::string& what) const {
    throw InputError(where_ + "field '" + path_ + (key.empty() ? "" : "." + key) + "': " + what);
  }

 private:
  std::string where_, path_;
};

void validate_check(const RubricCheck& check, const FieldError& fail) {
  if (const auto* c = std::get_if<ContainsCheck>(&check)) {
    if (c->values.empty() && !c->include_prompt) {
      fail("check.values", "give at least one value (or \"include_prompt\": true)");
    }
    for (const std::string& v : c->values) {
      if (v.empty()) fail("check.values", "a value is empty (every response contains it)");
    }
  } else if (const auto* r = std::get_if<RegexCheck>(&check)) {
    if (r->compiled == nullptr)
      fail("check.pattern", "is not compiled (build it with regex_check)");
  } else if (const auto* l = std::get_if<LengthCheck>(&check)) {
    if (!l->min && !l->max) fail("check", "a length check needs \"min\", \"max\" or both");
    if (l->min && *l->min < 0) fail("check.min", "must be >= 0");
    if (l->max && *l->max < 0) fail("check.max", "must be >= 0");
    if (l->min && l->max && *l->min > *l->max) {
      fail("check.max", "is " + std::to_string(*l->max) + ", below min " + std::to_string(*l->min));
    }
  } else if (const auto* g = std::get_if<NgramRepetitionCheck>(&check)) {
    if (g->n < 1 || g->n > kMaxNgram) {
      fail("check.n",
           "must be in 1.." + std::to_string(kMaxNgram) + ", not " + std::to_string(g->n));
    }
    if (!(g->max_fraction >= 0 && g->max_fraction <= 1)) {
      fail("check.max_fraction", "must be in [0, 1] (a fraction of the n-grams)");
    }
  } else if (const auto* n = std::get_if<NumericCheck>(&check)) {
    if (!std::isfinite(n->value)) fail("check.value", "must be a finite number");
    if (!(n->tolerance >= 0 && std::isfinite(n->tolerance))) {
      fail("check.tolerance", "must be a finite number >= 0");
    }
  } else if (const auto* v = std::get_if<VerifierCheck>(&check)) {
    try {
      task_family(v->task);
    } catch (const InputError& e) {
      fail("check.task", e.what());
    }
    if (!(v->min_reward >= 0 && v->min_reward <= 1)) fail("check.min_reward", "must be in [0, 1]");
  }
}

void validate_criterion(const Criterion& c, const FieldError& fail) {
  if (c.name.empty()) fail("name", "must not be empty");
  if (c.description.empty()) {
    fail("description", "must not be empty (it says what the criterion asks; a judge is asked it)");
  }
  if (c.explicit_weight) {
    const double w = *c.explicit_weight;
    if (!std::isfinite(w)) fail("weight", "must be a finite number");
    if (c.weight_class == WeightClass::kPitfall && w > 0) {
      fail("weight", "is " + format_weight(w) +
                         " but a pitfall's weight is <= 0: the criterion describes a mistake and "
                         "subtracts when the response makes it (give -" +
                         format_weight(w) + ", or another class)");
    }
    if (c.weight_class != WeightClass::kPitfall && w < 0) {
      fail("weight", "is " + format_weight(w) + " but a " +
                         std::string(weight_class_name(c.weight_class)) +
                         " criterion's weight is >= 0 (a mistake that subtracts is a "
                         "\"pitfall\" criterion)");
    }
  }
  validate_check(c.check, fail);
}

std::string criterion_path(size_t prompt, bool own, size_t index) {
  return (own ? "prompts[" + std::to_string(prompt) + "].criteria" : std::string("criteria")) +
         "[" + std::to_string(index) + "]";
}

}  // namespace

std::string_view weight_class_name(WeightClass c) {
  switch (c) {
    case WeightClass::kEssential:
      return "essential";
    case WeightClass::kImportant:
      return "important";
    case WeightClass::kOptional:
      return "optional";
    case WeightClass::kPitfall:
      return "pitfall";
  }
  return "?";
}

std::vector<WeightClass> all_weight_classes() {
  return {WeightClass::kEssential, WeightClass::kImportant, WeightClass::kOptional,
          WeightClass::kPitfall};
}

double default_weight(WeightClass c) {
  switch (c) {
    case WeightClass::kEssential:
      return 1.0;
    case WeightClass::kImportant:
      return 0.7;
    case WeightClass::kOptional:
      return 0.3;
    case WeightClass::kPitfall:
      return -0.9;
  }
  return 0;
}

std::vector<std::string> rubric_check_type_names() {
  std::vector<std::string> names;
  for (const CheckTypeInfo& t : check_types()) names.push_back(t.name);
  return names;
}

std::string_view rubric_check_type(const RubricCheck& check) {
  return check_types()[check.index()].name;
}

std::vector<std::string> rubric_check_option_names(std::string_view type) {
  for (const CheckTypeInfo& t : check_types()) {
    if (t.name == type) return t.options;
  }
  return {};
}

RegexCheck regex_check(std::string pattern, bool ignore_case, bool last_line) {
  RegexCheck r;
  auto flags = std::regex::ECMAScript;
  if (ignore_case) flags |= std::regex::icase;
  try {
    r.compiled = std::make_shared<const std::regex>(pattern, flags);
  } catch (const std::regex_error& e) {
    throw InputError("/" + pattern +
                     "/ is not a valid ECMAScript regular expression: " + std::string(e.what()));
  }
  r.pattern = std::move(pattern);
  r.ignore_case = ignore_case;
  r.last_line = last_line;
  return r;
}

std::vector<const Criterion*> Rubric::criteria_for(const RubricItem& item) const {
  std::vector<const Criterion*> out;
  for (const Criterion& c : criteria) out.push_back(&c);
  for (const Criterion& c : item.criteria) out.push_back(&c);
  return out;
}

const RubricItem* Rubric::find_prompt(std::string_view prompt_name) const {
  for (const RubricItem& item : prompts) {
    if (item.name == prompt_name) return &item;
  }
  return nullptr;
}

std::vector<std::string> rubric_field_names() {
  return kRubricFields;
}

std::vector<std::string> rubric_prompt_field_names() {
  return kPromptFields;
}

std::vector<std::string> rubric_criterion_field_names() {
  return kCriterionFields;
}

bool rubric_uses_judge(const Rubric& rubric) {
  const auto judged = [](const Criterion& c) {
    return std::holds_alternative<JudgeCheck>(c.check);
  };
  for (const Criterion& c : rubric.criteria) {
    if (judged(c)) return true;
  }
  for (const RubricItem& item : rubric.prompts) {
    for (const Criterion& c : item.criteria) {
      if (judged(c)) return true;
    }
  }
  return false;
}

void validate_rubric(const Rubric& rubric) {
  const std::string where = rubric_where(rubric.path);
  const auto fail_at = [&](const std::string& path, const std::string& what) {
    throw InputError(where + "field '" + path + "': " + what);
  };
  if (rubric.name.empty()) fail_at("name", "must not be empty");
  if (rubric.prompts.empty()) {
    fail_at("prompts", "the rubric has no prompts (give at least one {\"name\", \"prompt\"})");
  }
  std::set<std::string> top_names;
  double top_positive = 0;
  for (size_t i = 0; i < rubric.criteria.size(); ++i) {
    const Criterion& c = rubric.criteria[i];
    const std::string path = criterion_path(0, false, i);
    validate_criterion(c, FieldError(where, path));
    if (!top_names.insert(c.name).second) {
      fail_at(path + ".name", "another of the rubric's criteria is named '" + c.name + "'");
    }
    top_positive += std::max(0.0, c.weight());
  }
  bool any_positive = top_positive > 0;
  for (const RubricItem& item : rubric.prompts) {
    for (const Criterion& c : item.criteria) any_positive = any_positive || c.weight() > 0;
  }
  if (!any_positive) {
    fail_at("criteria",
            "no criterion has a positive weight, so there is nothing to reward: the reward is "
            "the met criteria's weights over the sum of the positive weights (add an essential, "
            "important or optional criterion)");
  }

  std::set<std::string> prompt_names;
  // Rates are kept per criterion name (rubric_rates.hpp): one name, one class and weight.
  std::map<std::string, std::pair<const Criterion*, std::string>> by_name;
  for (const Criterion& c : rubric.criteria) by_name.emplace(c.name, std::make_pair(&c, ""));
  for (size_t k = 0; k < rubric.prompts.size(); ++k) {
    const RubricItem& item = rubric.prompts[k];
    const std::string path = "prompts[" + std::to_string(k) + "]";
    if (item.name.empty()) fail_at(path + ".name", "must not be empty");
    if (!prompt_names.insert(item.name).second) {
      fail_at(path + ".name", "another prompt is named '" + item.name +
                                  "' (responses name the prompt they answer)");
    }
    if (item.prompt.empty()) fail_at(path + ".prompt", "must not be empty");
    std::set<std::string> names = top_names;
    double positive = top_positive;
    for (size_t i = 0; i < item.criteria.size(); ++i) {
      const Criterion& c = item.criteria[i];
      const std::string cpath = criterion_path(k, true, i);
      validate_criterion(c, FieldError(where, cpath));
      if (!names.insert(c.name).second) {
        fail_at(cpath + ".name",
                "another criterion of this prompt (its own or the rubric's) is "
                "named '" +
                    c.name + "'");
      }
      const auto [it, inserted] = by_name.emplace(c.name, std::make_pair(&c, cpath));
      const Criterion& first = *it->second.first;
      if (!inserted && first.weight_class != c.weight_class) {
        fail_at(cpath + ".class", "'" + c.name + "' is " +
                                      std::string(weight_class_name(first.weight_class)) + " at " +
                                      it->second.second +
                                      "; rates are kept per name, so give "
                                      "one class (or another name)");
      }
      if (!inserted && first.weight() != c.weight()) {
        fail_at(cpath + ".weight", "'" + c.name + "' weighs " + format_weight(first.weight()) +
                                       " at " + it->second.second + ", here " +
                                       format_weight(c.weight()) +
                                       "; rates are kept per name, so give one weight (or "
                                       "another name)");
      }
      positive += std::max(0.0, c.weight());
    }
    if (!(positive > 0)) {
      fail_at(path + ".criteria",
              "prompt '" + item.name +
                  "' has no criterion with a positive weight (its own or the rubric's), so "
                  "its reward would divide by 0; add an essential, important or optional one");
    }
    for (const Criterion* c : rubric.criteria_for(item)) {
      const auto* v = std::get_if<VerifierCheck>(&c->check);
      if (v == nullptr) continue;
      if (!item.task) {
        fail_at(path + ".task", "is missing: criterion '" + c->name + "' verifies " + v->task +
                                    " answers against the prompt's task (give its canonical "
                                    "text, e.g. \"task\": \"addition:17+25\")");
      }
      if (item.task->family != v->task) {
        fail_at(path + ".task", "is a " + item.task->family + " problem, but criterion '" +
                                    c->name + "' verifies " + v->task + " answers");
      }
    }
  }
}

Rubric parse_rubric(std::string_view text, const std::string& path) {
  const std::string where = rubric_where(path);
  Json j;
  try {
    j = Json::parse(text.begin(), text.end());
  } catch (const nlohmann::json::parse_error& e) {
    throw InputError(where + "not valid JSON: " + std::string(e.what()));
  }
  if (!j.is_object()) {
    throw InputError(where +
                     "must be a JSON object with \"name\", \"criteria\" and \"prompts\" (see "
                     "docs/rubric.schema.json)");
  }
  const JsonFields f(j, where, "");
  f.only(kRubricFields);
  Rubric r;
  r.path = path;
  r.name = f.str("name");
  r.description = f.optional_str("description");
  r.criteria = read_criteria(f, "criteria");
  const Json& prompts = f.array("prompts");
  for (size_t k = 0; k < prompts.size(); ++k) {
    r.prompts.push_back(read_prompt(prompts[k], where, "prompts[" + std::to_string(k) + "]"));
  }
  validate_rubric(r);
  return r;
}

Rubric load_rubric(const std::string& path) {
  if (!file_exists(path)) {
    throw InputError("rubric '" + path +
                     "' does not exist (write one as docs/rubric.schema.json describes, or "
                     "`nanogpt evals make-rubric --builtin fortune-answers --out FILE`)");
  }
  return parse_rubric(read_file(path), path);
}

}  // namespace nanogpt
