#include "eval/evaluators.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <regex>

#include "eval/evaluator_metrics.hpp"
#include "eval/line_regex.hpp"
#include "eval/number_text.hpp"
#include "eval/task_registry.hpp"
#include "runtime/error.hpp"

namespace nanogpt {

namespace {

using Json = nlohmann::ordered_json;

std::string join(const std::vector<std::string>& items) {
  std::string s;
  for (const std::string& i : items) s += (s.empty() ? "" : ", ") + i;
  return s;
}

// A short quotation of a model output for reasons.
std::string quote(std::string_view s) {
  constexpr size_t kMax = 60;
  std::string out = "'";
  out += s.size() > kMax ? std::string(s.substr(0, kMax)) + "..." : std::string(s);
  out += "'";
  return out;
}

std::string format_number(double x) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.6g", x);
  return buf;
}

EvaluatorOutcome outcome(const std::string& name, OutcomeKind kind) {
  EvaluatorOutcome r;
  r.evaluator = name;
  r.kind = kind;
  return r;
}

// Reads a spec's options, refusing unknown ones and naming the option in every error.
class Options {
 public:
  Options(const Json& spec, const std::string& where, const std::string& field,
          std::string_view type, std::vector<std::string> known)
      : where_(where), field_(field), known_(std::move(known)) {
    known_.insert(known_.begin(), {"type", "name"});
    if (spec.is_string()) return;
    spec_ = &spec;
    for (const auto& item : spec.items()) {
      if (std::find(known_.begin(), known_.end(), item.key()) == known_.end()) {
        fail(item.key(), "unknown option for the " + std::string(type) +
                             " evaluator (known: " + join(known_) + ")");
      }
    }
  }

  [[noreturn]] void fail(const std::string& option, const std::string& what) const {
    throw InputError(where_ + "field '" + field_ + "." + option + "': " + what);
  }
  bool has(const std::string& key) const { return spec_ != nullptr && spec_->contains(key); }

  std::optional<std::string> str(const std::string& key) const {
    if (!has(key)) return std::nullopt;
    const Json& v = spec_->at(key);
    if (!v.is_string()) fail(key, "must be a string");
    return v.get<std::string>();
  }
  bool boolean(const std::string& key, bool fallback) const {
    if (!has(key)) return fallback;
    const Json& v = spec_->at(key);
    if (!v.is_boolean()) fail(key, "must be true or false");
    return v.get<bool>();
  }
  std::optional<double> number(const std::string& key) const {
    if (!has(key)) return std::nullopt;
    const Json& v = spec_->at(key);
    if (!v.is_number()) fail(key, "must be a number");
    return v.get<double>();
  }
  std::optional<int64_t> integer(const std::string& key) const {
    if (!has(key)) return std::nullopt;
    const Json& v = spec_->at(key);
    if (!v.is_number_integer()) fail(key, "must be an integer");
    return v.get<int64_t>();
  }
  // "value" (a string, or a number kept as its JSON text) or "values" (a non-empty array of
  // strings); nullopt when neither is given.
  std::optional<std::vector<std::string>> expected_values() const {
    if (has("value") && has("values")) fail("values", "give either 'value' or 'values', not both");
    if (has("value")) {
      const Json& v = spec_->at("value");
      if (v.is_string()) return std::vector<std::string>{v.get<std::string>()};
      if (v.is_number()) return std::vector<std::string>{v.dump()};
      fail("value", "must be a string or a number");
    }
    if (has("values")) {
      const Json& v = spec_->at("values");
      if (!v.is_array() || v.empty()) fail("values", "must be a non-empty array of strings");
      std::vector<std::string> out;
      for (const Json& s : v) {
        if (!s.is_string()) fail("values", "must be a non-empty array of strings");
        out.push_back(s.get<std::string>());
      }
      return out;
    }
    return std::nullopt;
  }

 private:
  std::string where_, field_;
  std::vector<std::string> known_;
  const Json* spec_ = nullptr;
};

struct TextMatchOptions {
  bool ignore_case = false;
  bool ignore_punctuation = false;
  bool strip = true;
};

std::string normalize(std::string_view s, const TextMatchOptions& o) {
  std::string out;
  for (char c : s) {
    const unsigned char u = static_cast<unsigned char>(c);
    if (o.ignore_punctuation && std::ispunct(u)) continue;
    out += o.ignore_case ? static_cast<char>(std::tolower(u)) : c;
  }
  return o.strip ? std::string(trim(out)) : out;
}

TextMatchOptions read_match_options(const Options& opt) {
  TextMatchOptions m;
  m.ignore_case = opt.boolean("ignore_case", false);
  m.ignore_punctuation = opt.boolean("ignore_punctuation", false);
  m.strip = opt.boolean("strip", true);
  return m;
}

void write_match_options(Json& spec, const TextMatchOptions& m) {
  spec["ignore_case"] = m.ignore_case;
  spec["ignore_punctuation"] = m.ignore_punctuation;
  spec["strip"] = m.strip;
}

// The evaluators that compare text against expected values: the spec's, else the case's.
class ExpectingEvaluator : public Evaluator {
 public:
  std::optional<CaseProblem> check_case(const SuiteCase& c) const override {
    if (values_.empty() && !c.expected) {
      return CaseProblem{"expected", "the " + name_ +
                                         " evaluator needs an expected output "
                                         "(or a 'value' in its spec)"};
    }
    return std::nullopt;
  }

 protected:
  void read_values(const Options& opt) {
    if (auto v = opt.expected_values()) values_ = *v;
  }
  void write_values(Json& spec) const {
    if (values_.size() == 1) spec["value"] = values_[0];
    if (values_.size() > 1) spec["values"] = values_;
  }
  std::vector<std::string> expected(const SuiteCase& c) const {
    if (!values_.empty()) return values_;
    return {c.expected.value_or("")};
  }
  std::vector<std::string> values_;
};

class ExactMatch final : public ExpectingEvaluator {
 public:
  explicit ExactMatch(const Options& opt) {
    read_values(opt);
    match_ = read_match_options(opt);
    spec_["type"] = type();
    write_values(spec_);
    write_match_options(spec_, match_);
  }
  std::string_view type() const override { return "exact_match"; }
  bool accepts(CaseKind k) const override { return k == CaseKind::kGenerate; }
  EvaluatorOutcome evaluate(const SuiteCase& c, const Observation& o) const override {
    EvaluatorOutcome r = outcome(name_, OutcomeKind::kAssertion);
    const std::string got = normalize(o.output, match_);
    for (const std::string& e : expected(c)) {
      if (got == normalize(e, match_)) {
        r.passed = true;
        r.value = 1;
        r.reason = "equals " + quote(e);
        return r;
      }
    }
    r.reason = quote(got) + " is not " + quote(expected(c)[0]) +
               (expected(c).size() > 1 ? " or another expected value" : "");
    return r;
  }

 private:
  TextMatchOptions match_;
};

class Contains final : public ExpectingEvaluator {
 public:
  explicit Contains(const Options& opt) {
    read_values(opt);
    match_.ignore_case = opt.boolean("ignore_case", false);
    match_.strip = false;
    spec_["type"] = type();
    write_values(spec_);
    spec_["ignore_case"] = match_.ignore_case;
  }
  std::string_view type() const override { return "contains"; }
  bool accepts(CaseKind k) const override { return k == CaseKind::kGenerate; }
  EvaluatorOutcome evaluate(const SuiteCase& c, const Observation& o) const override {
    EvaluatorOutcome r = outcome(name_, OutcomeKind::kAssertion);
    const std::string got = normalize(o.output, match_);
    for (const std::string& e : expected(c)) {
      if (got.find(normalize(e, match_)) != std::string::npos) {
        r.passed = true;
        r.value = 1;
        r.reason = "contains " + quote(e);
        return r;
      }
    }
    r.reason = quote(o.output) + " contains none of the expected values";
    return r;
  }

 private:
  TextMatchOptions match_;
};

// The regex part shared by regex, numeric and regex_label.
class RegexSelector {
 public:
  RegexSelector() = default;
  RegexSelector(const Options& opt, bool required, const std::string& fallback_pattern) {
    std::optional<std::string> p = opt.str("pattern");
    if (!p && required) opt.fail("pattern", "is required");
    given_ = p.has_value();
    pattern_ = p.value_or(fallback_pattern);
    try {
      re_ = std::regex(pattern_, std::regex::ECMAScript);
    } catch (const std::regex_error& e) {
      opt.fail("pattern", "is not a valid ECMAScript regular expression: " + std::string(e.what()));
    }
    const int64_t groups = static_cast<int64_t>(re_.mark_count());
    group_ = opt.integer("group").value_or(groups > 0 ? 1 : 0);
    if (group_ < 0 || group_ > groups) {
      opt.fail("group", "is " + std::to_string(group_) + " but the pattern has " +
                            std::to_string(groups) + " groups");
    }
    const std::string select = opt.str("select").value_or("first");
    if (select != "first" && select != "last") opt.fail("select", "must be first or last");
    last_ = select == "last";
  }
  // Line by line (line_regex.hpp: each line's first kMaxRegexLineBytes bytes).
  std::optional<std::string> find(std::string_view text) const {
    std::optional<std::string> found;
    for_each_line_match(re_, text, [&](const std::smatch& m) {
      found = m[static_cast<int>(group_)].str();
      return last_;
    });
    return found;
  }
  void write(Json& spec) const {
    if (given_) {
      spec["pattern"] = pattern_;
      spec["group"] = group_;
    }
    spec["select"] = last_ ? "last" : "first";
  }
  const std::string& pattern() const { return pattern_; }

 private:
  bool given_ = false;
  std::string pattern_;
  std::regex re_;
  int64_t group_ = 0;
  bool last_ = false;
};

class RegexMatch final : public ExpectingEvaluator {
 public:
  explicit RegexMatch(const Options& opt) : selector_(opt, true, "") {
    read_values(opt);
    match_ = read_match_options(opt);
    spec_["type"] = type();
    selector_.write(spec_);
    write_values(spec_);
    write_match_options(spec_, match_);
  }
  std::string_view type() const override { return "regex"; }
  bool accepts(CaseKind k) const override { return k == CaseKind::kGenerate; }
  EvaluatorOutcome evaluate(const SuiteCase& c, const Observation& o) const override {
    EvaluatorOutcome r = outcome(name_, OutcomeKind::kAssertion);
    const std::optional<std::string> m = selector_.find(o.output);
    if (!m) {
      r.reason = "no match for /" + selector_.pattern() + "/ in " + quote(o.output);
      return r;
    }
    for (const std::string& e : expected(c)) {
      if (normalize(*m, match_) == normalize(e, match_)) {
        r.passed = true;
        r.value = 1;
        r.reason = "extracted " + quote(*m) + ", equals " + quote(e);
        return r;
      }
    }
    r.reason = "extracted " + quote(*m) + ", expected " + quote(expected(c)[0]);
    return r;
  }

 private:
  RegexSelector selector_;
  TextMatchOptions match_;
};

class NumericMatch final : public Evaluator {
 public:
  explicit NumericMatch(const Options& opt) : selector_(opt, false, std::string(kNumberPattern)) {
    if (opt.has("value")) {
      const std::optional<std::vector<std::string>> v = opt.expected_values();
      value_ = parse_number((*v)[0]);
      if (!value_) opt.fail("value", "must be a number");
    }
    abs_tol_ = opt.number("abs_tol").value_or(0.0);
    rel_tol_ = opt.number("rel_tol").value_or(0.0);
    if (!(abs_tol_ >= 0)) opt.fail("abs_tol", "must be >= 0");
    if (!(rel_tol_ >= 0)) opt.fail("rel_tol", "must be >= 0");
    spec_["type"] = type();
    selector_.write(spec_);
    if (value_) spec_["value"] = *value_;
    spec_["abs_tol"] = abs_tol_;
    spec_["rel_tol"] = rel_tol_;
  }
  std::string_view type() const override { return "numeric"; }
  bool accepts(CaseKind k) const override { return k == CaseKind::kGenerate; }
  std::optional<CaseProblem> check_case(const SuiteCase& c) const override {
    if (value_) return std::nullopt;
    if (!c.expected) {
      return CaseProblem{"expected",
                         "the " + name_ + " evaluator needs an expected number (or a 'value')"};
    }
    if (!parse_number(*c.expected)) {
      return CaseProblem{"expected", quote(*c.expected) + " is not a number, which the " + name_ +
                                         " evaluator needs"};
    }
    return std::nullopt;
  }
  EvaluatorOutcome evaluate(const SuiteCase& c, const Observation& o) const override {
    EvaluatorOutcome r = outcome(name_, OutcomeKind::kAssertion);
    const double want = value_ ? *value_ : parse_number(c.expected.value_or("")).value_or(NAN);
    const std::optional<std::string> m = selector_.find(o.output);
    const std::optional<double> got = m ? parse_number(*m) : std::nullopt;
    if (!got) {
      r.reason = "no number in " + quote(o.output);
      return r;
    }
    const double tol = std::max(abs_tol_, rel_tol_ * std::abs(want));
    r.passed = std::abs(*got - want) <= tol;
    r.value = r.passed ? 1 : 0;
    r.reason = format_number(*got) + (r.passed ? " is within " : " is not within ") +
               format_number(tol) + " of " + format_number(want);
    return r;
  }

 private:
  RegexSelector selector_;
  std::optional<double> value_;
  double abs_tol_ = 0, rel_tol_ = 0;
};

class VerifierEvaluator final : public Evaluator {
 public:
  explicit VerifierEvaluator(const Options& opt) {
    if (std::optional<std::string> t = opt.str("task")) {
      try {
        task_family(*t);
      } catch (const InputError& e) {
        opt.fail("task", e.what());
      }
      task_ = *t;
    }
    min_reward_ = opt.number("min_reward").value_or(1.0);
    if (!(min_reward_ >= 0 && min_reward_ <= 1)) opt.fail("min_reward", "must be in [0, 1]");
    spec_["type"] = type();
    if (!task_.empty()) spec_["task"] = task_;
    spec_["min_reward"] = min_reward_;
  }
  std::string_view type() const override { return "verifier"; }
  bool accepts(CaseKind k) const override { return k == CaseKind::kGenerate; }
  std::optional<CaseProblem> check_case(const SuiteCase& c) const override {
    if (!c.task) {
      return CaseProblem{"task", "the " + name_ + " evaluator needs the case's task instance"};
    }
    if (!task_.empty() && c.task->family != task_) {
      return CaseProblem{"task", "the case's task is " + c.task->family + ", the " + name_ +
                                     " evaluator verifies " + task_};
    }
    return std::nullopt;
  }
  EvaluatorOutcome evaluate(const SuiteCase& c, const Observation& o) const override {
    EvaluatorOutcome r = outcome(name_, OutcomeKind::kAssertion);
    if (!c.task) throw Error("verifier evaluator on case '" + c.name + "' without a task");
    const Reward reward = verify(*c.task, o.output);
    r.value = reward.value;
    r.passed = reward.value >= min_reward_;
    r.reason = reward.reason;
    return r;
  }

 private:
  std::string task_;
  double min_reward_ = 1;
};

class RegexLabel final : public Evaluator {
 public:
  explicit RegexLabel(const Options& opt) : selector_(opt, true, "") {
    spec_["type"] = type();
    selector_.write(spec_);
  }
  std::string_view type() const override { return "regex_label"; }
  bool accepts(CaseKind k) const override { return k == CaseKind::kGenerate; }
  EvaluatorOutcome evaluate(const SuiteCase&, const Observation& o) const override {
    EvaluatorOutcome r = outcome(name_, OutcomeKind::kLabel);
    const std::optional<std::string> m = selector_.find(o.output);
    r.label = m.value_or("none");
    r.reason = m ? "matched " + quote(*m) : "no match for /" + selector_.pattern() + "/";
    return r;
  }

 private:
  RegexSelector selector_;
};

enum class ChoiceRule { kAcc, kAccNorm, kAccBytes };

class ChoiceAccuracy final : public Evaluator {
 public:
  ChoiceAccuracy(const Options&, ChoiceRule rule) : rule_(rule) { spec_["type"] = type(); }
  std::string_view type() const override {
    return rule_ == ChoiceRule::kAcc       ? "acc"
           : rule_ == ChoiceRule::kAccNorm ? "acc_norm"
                                           : "acc_bytes";
  }
  bool accepts(CaseKind k) const override { return k == CaseKind::kChoice; }
  EvaluatorOutcome evaluate(const SuiteCase& c, const Observation& o) const override {
    if (o.choice_logprobs.size() != c.choices.size()) {
      throw Error("case '" + c.name + "': " + std::to_string(o.choice_logprobs.size()) +
                  " log-likelihoods for " + std::to_string(c.choices.size()) + " choices");
    }
    const size_t pick = rule_ == ChoiceRule::kAcc ? choice_acc(o.choice_logprobs)
                        : rule_ == ChoiceRule::kAccNorm
                            ? choice_acc_norm(o.choice_logprobs, c.choices)
                            : choice_acc_bytes(o.choice_logprobs, c.choices);
    EvaluatorOutcome r = outcome(name_, OutcomeKind::kAssertion);
    const size_t gold = static_cast<size_t>(c.gold);
    r.passed = pick == gold;
    r.value = r.passed ? 1 : 0;
    r.reason = "picked choice " + std::to_string(pick) + " (" + unit_score(c, o, pick) +
               "), gold is " + std::to_string(gold) + " (" + unit_score(c, o, gold) + ")";
    return r;
  }

 private:
  std::string unit_score(const SuiteCase& c, const Observation& o, size_t i) const {
    const double lp = o.choice_logprobs[i];
    if (rule_ == ChoiceRule::kAcc) return "log-likelihood " + format_number(lp);
    if (rule_ == ChoiceRule::kAccNorm) {
      return format_number(lp / static_cast<double>(utf8_characters(c.choices[i]))) +
             " per character";
    }
    return format_number(lp / static_cast<double>(c.choices[i].size())) + " per byte";
  }
  ChoiceRule rule_;
};

enum class TextMetric { kLoss, kPerplexity, kBitsPerByte };

class TextScore final : public Evaluator {
 public:
  TextScore(const Options&, TextMetric metric) : metric_(metric) { spec_["type"] = type(); }
  std::string_view type() const override {
    return metric_ == TextMetric::kLoss         ? "loss"
           : metric_ == TextMetric::kPerplexity ? "perplexity"
                                                : "bits_per_byte";
  }
  bool accepts(CaseKind k) const override { return k == CaseKind::kText; }
  EvaluatorOutcome evaluate(const SuiteCase& c, const Observation& o) const override {
    EvaluatorOutcome r = outcome(name_, OutcomeKind::kScore);
    r.higher_is_better = false;
    const int64_t bytes = static_cast<int64_t>(c.text.size());
    switch (metric_) {
      case TextMetric::kLoss:
        r.value = text_loss(o.text_logprob, o.text_tokens);
        r.reason = format_number(r.value) + " nats per token over " +
                   std::to_string(o.text_tokens) + " tokens";
        break;
      case TextMetric::kPerplexity:
        r.value = text_perplexity(o.text_logprob, o.text_tokens);
        r.reason = "exp of the loss over " + std::to_string(o.text_tokens) + " tokens";
        break;
      case TextMetric::kBitsPerByte:
        r.value = text_bits_per_byte(o.text_logprob, bytes);
        r.reason = format_number(-o.text_logprob / std::log(2.0)) + " bits over " +
                   std::to_string(bytes) + " bytes";
        break;
    }
    return r;
  }

 private:
  TextMetric metric_;
};

class MaxDuration final : public Evaluator {
 public:
  explicit MaxDuration(const Options& opt) {
    const std::optional<double> s = opt.number("seconds");
    if (!s) opt.fail("seconds", "is required");
    if (!(*s > 0)) opt.fail("seconds", "must be > 0");
    seconds_ = *s;
    spec_["type"] = type();
    spec_["seconds"] = seconds_;
  }
  std::string_view type() const override { return "max_duration"; }
  bool accepts(CaseKind) const override { return true; }
  EvaluatorOutcome evaluate(const SuiteCase&, const Observation& o) const override {
    EvaluatorOutcome r = outcome(name_, OutcomeKind::kAssertion);
    r.passed = o.duration_seconds <= seconds_;
    r.value = r.passed ? 1 : 0;
    r.reason = format_number(o.duration_seconds) + " s" + (r.passed ? " <= " : " > ") +
               format_number(seconds_) + " s";
    return r;
  }

 private:
  double seconds_ = 0;
};

using Factory = std::function<std::shared_ptr<Evaluator>(const Options&)>;

struct EvaluatorType {
  std::string name;
  std::vector<CaseKind> kinds;
  std::vector<std::string> options;
  Factory make;
};

const std::vector<EvaluatorType>& types() {
  const std::vector<CaseKind> gen = {CaseKind::kGenerate};
  const std::vector<std::string> match = {"value", "values", "ignore_case", "ignore_punctuation",
                                          "strip"};
  const std::vector<std::string> regex = {"pattern", "group", "select"};
  std::vector<std::string> regex_match = regex;
  regex_match.insert(regex_match.end(), match.begin(), match.end());
  std::vector<std::string> numeric = regex;
  numeric.insert(numeric.end(), {"value", "abs_tol", "rel_tol"});
  static const std::vector<EvaluatorType> table = {
      {"exact_match", gen, match, [](const Options& o) { return std::make_shared<ExactMatch>(o); }},
      {"contains",
       gen,
       {"value", "values", "ignore_case"},
       [](const Options& o) { return std::make_shared<Contains>(o); }},
      {"regex", gen, regex_match, [](const Options& o) { return std::make_shared<RegexMatch>(o); }},
      {"numeric", gen, numeric, [](const Options& o) { return std::make_shared<NumericMatch>(o); }},
      {"verifier",
       gen,
       {"task", "min_reward"},
       [](const Options& o) { return std::make_shared<VerifierEvaluator>(o); }},
      {"regex_label", gen, regex, [](const Options& o) { return std::make_shared<RegexLabel>(o); }},
      {"acc",
       {CaseKind::kChoice},
       {},
       [](const Options& o) { return std::make_shared<ChoiceAccuracy>(o, ChoiceRule::kAcc); }},
      {"acc_norm",
       {CaseKind::kChoice},
       {},
       [](const Options& o) { return std::make_shared<ChoiceAccuracy>(o, ChoiceRule::kAccNorm); }},
      {"acc_bytes",
       {CaseKind::kChoice},
       {},
       [](const Options& o) { return std::make_shared<ChoiceAccuracy>(o, ChoiceRule::kAccBytes); }},
      {"loss",
       {CaseKind::kText},
       {},
       [](const Options& o) { return std::make_shared<TextScore>(o, TextMetric::kLoss); }},
      {"perplexity",
       {CaseKind::kText},
       {},
       [](const Options& o) { return std::make_shared<TextScore>(o, TextMetric::kPerplexity); }},
      {"bits_per_byte",
       {CaseKind::kText},
       {},
       [](const Options& o) { return std::make_shared<TextScore>(o, TextMetric::kBitsPerByte); }},
      {"max_duration",
       all_case_kinds(),
       {"seconds"},
       [](const Options& o) { return std::make_shared<MaxDuration>(o); }},
  };
  return table;
}

}  // namespace

std::string_view case_kind_name(CaseKind kind) {
  switch (kind) {
    case CaseKind::kText:
      return "text";
    case CaseKind::kChoice:
      return "choice";
    case CaseKind::kGenerate:
      return "generate";
  }
  return "?";
}

std::vector<CaseKind> all_case_kinds() {
  return {CaseKind::kText, CaseKind::kChoice, CaseKind::kGenerate};
}

std::string_view outcome_kind_name(OutcomeKind kind) {
  switch (kind) {
    case OutcomeKind::kAssertion:
      return "assertion";
    case OutcomeKind::kScore:
      return "score";
    case OutcomeKind::kLabel:
      return "label";
  }
  return "?";
}

std::optional<CaseProblem> Evaluator::check_case(const SuiteCase&) const {
  return std::nullopt;
}

std::vector<std::string> evaluator_type_names() {
  std::vector<std::string> names;
  for (const EvaluatorType& t : types()) names.push_back(t.name);
  return names;
}

std::vector<CaseKind> evaluator_case_kinds(std::string_view type) {
  for (const EvaluatorType& t : types()) {
    if (t.name == type) return t.kinds;
  }
  return {};
}

std::vector<std::string> evaluator_option_names(std::string_view type) {
  for (const EvaluatorType& t : types()) {
    if (t.name == type) return t.options;
  }
  return {};
}

std::shared_ptr<const Evaluator> make_evaluator(const Json& spec, const std::string& where,
                                                const std::string& field) {
  std::string type;
  if (spec.is_string()) {
    type = spec.get<std::string>();
  } else if (spec.is_object()) {
    if (!spec.contains("type")) {
      throw InputError(where + "field '" + field + ".type' is missing (known evaluators: " +
                       join(evaluator_type_names()) + ")");
    }
    if (!spec.at("type").is_string()) {
      throw InputError(where + "field '" + field + ".type' must be a string");
    }
    type = spec.at("type").get<std::string>();
  } else {
    throw InputError(where + "field '" + field +
                     "' must be an evaluator name or an object with a \"type\"");
  }
  for (const EvaluatorType& t : types()) {
    if (t.name != type) continue;
    const Options opt(spec, where, field, type, t.options);
    std::shared_ptr<Evaluator> e = t.make(opt);
    const std::optional<std::string> name = opt.str("name");
    if (name && name->empty()) opt.fail("name", "must not be empty");
    e->name_ = name.value_or(type);
    if (name) {
      Json named = {{"type", type}, {"name", *name}};
      for (const auto& item : e->spec_.items()) {
        if (item.key() != "type") named[item.key()] = item.value();
      }
      e->spec_ = std::move(named);
    }
    return e;
  }
  throw InputError(where + "field '" + field + (spec.is_object() ? ".type" : "") +
                   "': unknown evaluator '" + type + "' (known: " + join(evaluator_type_names()) +
                   ")");
}

}  // namespace nanogpt
