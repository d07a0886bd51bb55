#include "eval/eval_report.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>

#include "eval/pass_at_k.hpp"
#include "runtime/error.hpp"
#include "runtime/file_io.hpp"

namespace nanogpt {

namespace {

using Json = nlohmann::ordered_json;

// JSON has no NaN or infinity: they are written as null and read back as NaN (so a report
// still round-trips byte for byte).
Json number(double v) {
  return std::isfinite(v) ? Json(v) : Json(nullptr);
}

PassAtK pass_ks(int64_t n, int64_t c) {
  PassAtK out;
  for (int64_t k = 1; k < n; k *= 2) out.emplace_back(k, pass_at_k(n, c, k));
  out.emplace_back(n, pass_at_k(n, c, n));
  return out;
}

class Reader {
 public:
  Reader(const Json& j, std::string where) : j_(j), where_(std::move(where)) {}
  [[noreturn]] void fail(const std::string& key, const std::string& what) const {
    throw InputError(where_ + "field '" + key + "': " + what);
  }
  const Json& at(const std::string& key) const {
    if (!j_.is_object() || !j_.contains(key)) fail(key, "is missing");
    return j_.at(key);
  }
  std::string str(const std::string& key) const {
    const Json& v = at(key);
    if (!v.is_string()) fail(key, "must be a string");
    return v.get<std::string>();
  }
  double num(const std::string& key) const {
    const Json& v = at(key);
    if (v.is_null()) return std::numeric_limits<double>::quiet_NaN();
    if (!v.is_number()) fail(key, "must be a number");
    return v.get<double>();
  }
  int64_t integer(const std::string& key) const {
    const Json& v = at(key);
    if (!v.is_number_integer()) fail(key, "must be an integer");
    return v.get<int64_t>();
  }
  bool boolean(const std::string& key) const {
    const Json& v = at(key);
    if (!v.is_boolean()) fail(key, "must be true or false");
    return v.get<bool>();
  }
  const Json& array(const std::string& key) const {
    const Json& v = at(key);
    if (!v.is_array()) fail(key, "must be an array");
    return v;
  }
  OutcomeKind outcome_kind(const std::string& key) const {
    const std::string s = str(key);
    for (OutcomeKind k : {OutcomeKind::kAssertion, OutcomeKind::kScore, OutcomeKind::kLabel}) {
      if (s == outcome_kind_name(k)) return k;
    }
    fail(key, "unknown outcome kind '" + s + "' (assertion, score or label)");
  }
  PassAtK pass_at_k(const std::string& key) const {
    PassAtK out;
    for (const Json& e : array(key)) {
      if (!e.is_array() || e.size() != 2 || !e[0].is_number_integer() || !e[1].is_number()) {
        fail(key, "must hold [k, value] pairs");
      }
      out.emplace_back(e[0].get<int64_t>(), e[1].get<double>());
    }
    return out;
  }
  std::string where() const { return where_; }

 private:
  const Json& j_;
  std::string where_;
};

Json pass_at_k_json(const PassAtK& p) {
  Json a = Json::array();
  for (const auto& [k, v] : p) a.push_back(Json::array({k, number(v)}));
  return a;
}

Json outcome_json(const EvaluatorOutcome& o) {
  Json j;
  j["evaluator"] = o.evaluator;
  j["kind"] = std::string(outcome_kind_name(o.kind));
  j["passed"] = o.passed;
  j["value"] = number(o.value);
  j["higher_is_better"] = o.higher_is_better;
  j["label"] = o.label;
  j["reason"] = o.reason;
  return j;
}

EvaluatorOutcome parse_outcome(const Reader& r) {
  EvaluatorOutcome o;
  o.evaluator = r.str("evaluator");
  o.kind = r.outcome_kind("kind");
  o.passed = r.boolean("passed");
  o.value = r.num("value");
  o.higher_is_better = r.boolean("higher_is_better");
  o.label = r.str("label");
  o.reason = r.str("reason");
  return o;
}

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

// A short form of a value for tables: 4 significant digits.
std::string short_number(double v) {
  return fmt("%.4g", v);
}

}  // namespace

Json case_inputs_json(const SuiteCase& c) {
  switch (c.kind) {
    case CaseKind::kText:
      return Json{{"text", c.text}};
    case CaseKind::kChoice:
      return Json{{"context", c.context}, {"choices", c.choices}};
    case CaseKind::kGenerate:
      break;
  }
  return Json{{"prompt", c.prompt}};
}

Json case_expected_json(const SuiteCase& c) {
  if (c.kind == CaseKind::kChoice) return Json(c.gold);
  if (c.expected) return Json(*c.expected);
  return Json(nullptr);
}

void summarize_report(EvalReport& report) {
  struct Acc {
    OutcomeKind kind = OutcomeKind::kScore;
    bool higher_is_better = true;
    std::vector<double> means;
    int64_t passed_cases = 0;
    std::map<int64_t, std::pair<double, int64_t>> pass_sum;  // k -> (sum, cases)
  };
  std::vector<std::string> order;  // evaluators in order of first appearance
  std::map<std::string, Acc> acc;
  for (CaseRecord& c : report.cases) {
    c.summaries.clear();
    std::vector<std::string> names;
    std::map<std::string, std::vector<const EvaluatorOutcome*>> by;
    for (const SampleRecord& s : c.samples) {
      for (const EvaluatorOutcome& o : s.outcomes) {
        if (by.find(o.evaluator) == by.end()) names.push_back(o.evaluator);
        by[o.evaluator].push_back(&o);
      }
    }
    for (const std::string& name : names) {
      const auto& os = by[name];
      EvaluatorSummary s;
      s.evaluator = name;
      s.kind = os.front()->kind;
      s.higher_is_better = os.front()->higher_is_better;
      s.n = static_cast<int64_t>(os.size());
      double sum = 0;
      std::map<std::string, int64_t> labels;
      for (const EvaluatorOutcome* o : os) {
        sum += o->value;
        if (o->passed) ++s.passed;
        ++labels[o->label];
      }
      s.mean = sum / static_cast<double>(s.n);
      if (s.kind == OutcomeKind::kAssertion) {
        s.case_passed = 2 * s.passed >= s.n;
        s.pass_at_k = pass_ks(s.n, s.passed);
      }
      if (s.kind == OutcomeKind::kLabel) {
        int64_t best = -1;
        for (const EvaluatorOutcome* o : os) {  // first of the most frequent, in sample order
          if (labels[o->label] > best) {
            best = labels[o->label];
            s.label = o->label;
          }
        }
      }
      c.summaries.push_back(s);
      if (s.kind == OutcomeKind::kLabel) continue;
      if (acc.find(name) == acc.end()) {
        order.push_back(name);
        acc[name].kind = s.kind;
        acc[name].higher_is_better = s.higher_is_better;
      }
      Acc& a = acc[name];
      a.means.push_back(s.mean);
      if (s.case_passed) ++a.passed_cases;
      for (const auto& [k, v] : s.pass_at_k) {
        a.pass_sum[k].first += v;
        ++a.pass_sum[k].second;
      }
    }
  }
  report.averages.clear();
  for (const std::string& name : order) {
    const Acc& a = acc[name];
    AverageRecord r;
    r.evaluator = name;
    r.kind = a.kind;
    r.higher_is_better = a.higher_is_better;
    r.cases = static_cast<int64_t>(a.means.size());
    double sum = 0;
    for (double m : a.means) sum += m;
    r.mean = sum / static_cast<double>(r.cases);
    if (r.cases > 1) {
      double ss = 0;
      for (double m : a.means) ss += (m - r.mean) * (m - r.mean);
      r.standard_error =
          std::sqrt(ss / static_cast<double>(r.cases - 1) / static_cast<double>(r.cases));
    }
    if (a.kind == OutcomeKind::kAssertion) {
      r.pass_rate = static_cast<double>(a.passed_cases) / static_cast<double>(r.cases);
      for (const auto& [k, sc] : a.pass_sum) {
        r.pass_at_k.emplace_back(k, sc.first / static_cast<double>(sc.second));
      }
    }
    report.averages.push_back(r);
  }
}

std::string report_json(const EvalReport& report) {
  Json j;
  j["format"] = "nanogpt eval report 1";
  j["suite"] = report.suite;
  j["suite_path"] = report.suite_path;
  j["checkpoint"] = report.checkpoint;
  j["tokenizer"] = report.tokenizer;
  j["seed"] = report.seed;
  j["repeats"] = report.repeats;
  j["threads"] = report.threads;
  j["duration_seconds"] = number(report.duration_seconds);
  Json avg = Json::array();
  for (const AverageRecord& a : report.averages) {
    Json e;
    e["evaluator"] = a.evaluator;
    e["kind"] = std::string(outcome_kind_name(a.kind));
    e["higher_is_better"] = a.higher_is_better;
    e["cases"] = a.cases;
    e["mean"] = number(a.mean);
    e["standard_error"] = number(a.standard_error);
    e["pass_rate"] = number(a.pass_rate);
    e["pass_at_k"] = pass_at_k_json(a.pass_at_k);
    avg.push_back(e);
  }
  j["averages"] = avg;
  Json cases = Json::array();
  for (const CaseRecord& c : report.cases) {
    Json e;
    e["name"] = c.name;
    e["kind"] = std::string(case_kind_name(c.kind));
    e["inputs"] = c.inputs;
    e["expected"] = c.expected;
    e["duration_seconds"] = number(c.duration_seconds);
    Json sums = Json::array();
    for (const EvaluatorSummary& s : c.summaries) {
      Json x;
      x["evaluator"] = s.evaluator;
      x["kind"] = std::string(outcome_kind_name(s.kind));
      x["higher_is_better"] = s.higher_is_better;
      x["n"] = s.n;
      x["mean"] = number(s.mean);
      x["passed"] = s.passed;
      x["case_passed"] = s.case_passed;
      x["pass_at_k"] = pass_at_k_json(s.pass_at_k);
      x["label"] = s.label;
      sums.push_back(x);
    }
    e["summaries"] = sums;
    Json samples = Json::array();
    for (const SampleRecord& s : c.samples) {
      Json x;
      x["output"] = s.output;
      x["generated_tokens"] = s.generated_tokens;
      x["duration_seconds"] = number(s.duration_seconds);
      Json lp = Json::array();
      for (double v : s.choice_logprobs) lp.push_back(number(v));
      x["choice_logprobs"] = lp;
      x["text_logprob"] = number(s.text_logprob);
      x["text_tokens"] = s.text_tokens;
      Json outs = Json::array();
      for (const EvaluatorOutcome& o : s.outcomes) outs.push_back(outcome_json(o));
      x["outcomes"] = outs;
      samples.push_back(x);
    }
    e["samples"] = samples;
    cases.push_back(e);
  }
  j["cases"] = cases;
  // Invalid UTF-8 (the runner already repairs completions; this guards any other text) is
  // written as U+FFFD rather than failing the whole report.
  return j.dump(2, ' ', false, Json::error_handler_t::replace) + "\n";
}

EvalReport parse_report(std::string_view text, const std::string& path) {
  const std::string where = "report '" + path + "': ";
  Json j;
  try {
    j = Json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    throw InputError(where + "not valid JSON: " + e.what());
  }
  if (!j.is_object()) throw InputError(where + "must be a JSON object");
  const Reader r(j, where);
  if (r.str("format") != "nanogpt eval report 1") {
    r.fail("format", "not a report of `nanogpt evals run` (expected \"nanogpt eval report 1\")");
  }
  EvalReport rep;
  rep.suite = r.str("suite");
  rep.suite_path = r.str("suite_path");
  rep.checkpoint = r.str("checkpoint");
  rep.tokenizer = r.str("tokenizer");
  const Json& seed = r.at("seed");
  if (!seed.is_number_unsigned()) r.fail("seed", "must be a non-negative integer");
  rep.seed = seed.get<uint64_t>();
  rep.repeats = r.integer("repeats");
  rep.threads = r.integer("threads");
  rep.duration_seconds = r.num("duration_seconds");
  const Json& avg = r.array("averages");
  for (size_t i = 0; i < avg.size(); ++i) {
    const Reader a(avg[i], where + "averages[" + std::to_string(i) + "]: ");
    AverageRecord x;
    x.evaluator = a.str("evaluator");
    x.kind = a.outcome_kind("kind");
    x.higher_is_better = a.boolean("higher_is_better");
    x.cases = a.integer("cases");
    x.mean = a.num("mean");
    x.standard_error = a.num("standard_error");
    x.pass_rate = a.num("pass_rate");
    x.pass_at_k = a.pass_at_k("pass_at_k");
    rep.averages.push_back(x);
  }
  const Json& cases = r.array("cases");
  for (size_t i = 0; i < cases.size(); ++i) {
    const Json& cj = cases[i];
    std::string name = cj.is_object() && cj.contains("name") && cj["name"].is_string()
                           ? cj["name"].get<std::string>()
                           : "";
    const Reader c(cj, where + "case " + std::to_string(i) + " '" + name + "': ");
    CaseRecord rec;
    rec.name = c.str("name");
    const std::string kind = c.str("kind");
    bool known = false;
    for (CaseKind k : all_case_kinds()) {
      if (kind == case_kind_name(k)) {
        rec.kind = k;
        known = true;
      }
    }
    if (!known) c.fail("kind", "unknown case kind '" + kind + "'");
    rec.inputs = c.at("inputs");
    if (!rec.inputs.is_object()) c.fail("inputs", "must be an object");
    rec.expected = c.at("expected");
    rec.duration_seconds = c.num("duration_seconds");
    const Json& sums = c.array("summaries");
    for (size_t k = 0; k < sums.size(); ++k) {
      const Reader s(sums[k], c.where() + "summaries[" + std::to_string(k) + "].");
      EvaluatorSummary x;
      x.evaluator = s.str("evaluator");
      x.kind = s.outcome_kind("kind");
      x.higher_is_better = s.boolean("higher_is_better");
      x.n = s.integer("n");
      x.mean = s.num("mean");
      x.passed = s.integer("passed");
      x.case_passed = s.boolean("case_passed");
      x.pass_at_k = s.pass_at_k("pass_at_k");
      x.label = s.str("label");
      rec.summaries.push_back(x);
    }
    const Json& samples = c.array("samples");
    for (size_t k = 0; k < samples.size(); ++k) {
      const Reader s(samples[k], c.where() + "samples[" + std::to_string(k) + "].");
      SampleRecord x;
      x.output = s.str("output");
      x.generated_tokens = s.integer("generated_tokens");
      x.duration_seconds = s.num("duration_seconds");
      for (const Json& v : s.array("choice_logprobs")) {
        if (!v.is_number() && !v.is_null()) s.fail("choice_logprobs", "must hold numbers");
        x.choice_logprobs.push_back(v.is_null() ? std::numeric_limits<double>::quiet_NaN()
                                                : v.get<double>());
      }
      x.text_logprob = s.num("text_logprob");
      x.text_tokens = s.integer("text_tokens");
      const Json& outs = s.array("outcomes");
      for (size_t o = 0; o < outs.size(); ++o) {
        x.outcomes.push_back(
            parse_outcome(Reader(outs[o], s.where() + "outcomes[" + std::to_string(o) + "].")));
      }
      rec.samples.push_back(std::move(x));
    }
    rep.cases.push_back(std::move(rec));
  }
  return rep;
}

EvalReport load_report(const std::string& path) {
  return parse_report(read_file(path), path);
}

void save_report(const EvalReport& report, const std::string& path) {
  write_file_atomic(path, report_json(report));
}

std::string one_line(std::string_view text, size_t width) {
  std::string out;
  size_t points = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    const unsigned char ch = static_cast<unsigned char>(text[i]);
    if ((ch & 0xC0) != 0x80) {
      if (points == width) {
        // Cut: replace the last code point with an ellipsis.
        while (!out.empty() && (static_cast<unsigned char>(out.back()) & 0xC0) == 0x80) {
          out.pop_back();
        }
        if (!out.empty()) out.pop_back();
        return out + "…";
      }
      ++points;
    }
    if (text[i] == '\n') {
      out += "\\n";
    } else if (text[i] == '|') {
      out += "\\|";
    } else if (text[i] == '\t' || text[i] == '\r') {
      out += ' ';
    } else {
      out += text[i];
    }
  }
  return out;
}

std::string one_line_tail(std::string_view text, size_t width) {
  // The start of the last `width` code points.
  size_t points = 0, start = text.size();
  while (start > 0 && points < width) {
    --start;
    if ((static_cast<unsigned char>(text[start]) & 0xC0) != 0x80) ++points;
  }
  if (start == 0) return one_line(text, width);
  // One code point of the tail gives way to the ellipsis.
  size_t next = start + 1;
  while (next < text.size() && (static_cast<unsigned char>(text[next]) & 0xC0) == 0x80) ++next;
  return "…" + one_line(text.substr(next), width);
}

namespace {

// Appends `item` to a space-separated list.
void add_item(std::string& list, const std::string& item) {
  if (!list.empty()) list += ' ';
  list += item;
}

struct Row {
  std::string name, inputs, expected, output, scores, assertions, duration;
};

std::string inputs_text(const CaseRecord& c) {
  if (c.kind == CaseKind::kText) return c.inputs.value("text", "");
  if (c.kind == CaseKind::kChoice) return c.inputs.value("context", "");
  return c.inputs.value("prompt", "");
}

std::string expected_text(const CaseRecord& c) {
  if (c.expected.is_null()) return "";
  if (c.kind == CaseKind::kChoice && c.expected.is_number_integer()) {
    const int64_t g = c.expected.get<int64_t>();
    const Json& ch = c.inputs.contains("choices") ? c.inputs["choices"] : Json::array();
    std::string s = "#" + std::to_string(g);
    if (ch.is_array() && g >= 0 && g < static_cast<int64_t>(ch.size()) && ch[g].is_string()) {
      s += " " + ch[g].get<std::string>();
    }
    return s;
  }
  return c.expected.is_string() ? c.expected.get<std::string>() : c.expected.dump();
}

std::string output_text(const CaseRecord& c) {
  if (c.samples.empty()) return "";
  const SampleRecord& s = c.samples.front();
  if (c.kind == CaseKind::kChoice) {
    std::vector<double> lp = s.choice_logprobs;
    if (lp.empty()) return "";
    const size_t pick = static_cast<size_t>(std::max_element(lp.begin(), lp.end()) - lp.begin());
    return "#" + std::to_string(pick) + " (" + fmt("%.2f", lp[pick]) + ")";
  }
  if (c.kind == CaseKind::kText) {
    return std::to_string(s.text_tokens) + " tokens, logp " + fmt("%.2f", s.text_logprob);
  }
  return s.output +
         (c.samples.size() > 1 ? " (+" + std::to_string(c.samples.size() - 1) + ")" : "");
}

Row case_row(const CaseRecord& c, size_t width) {
  Row r;
  r.name = one_line(c.name, width);
  // A prompt ends with its question (few-shot examples come first): show its end.
  r.inputs = c.kind == CaseKind::kGenerate ? one_line_tail(inputs_text(c), width)
                                           : one_line(inputs_text(c), width);
  r.expected = one_line(expected_text(c), width);
  r.output = one_line(output_text(c), width);
  for (const EvaluatorSummary& s : c.summaries) {
    if (s.kind == OutcomeKind::kScore) {
      add_item(r.scores, s.evaluator + "=" + short_number(s.mean));
    } else if (s.kind == OutcomeKind::kAssertion) {
      std::string a = s.evaluator;
      if (s.n == 1) {
        a += s.case_passed ? " ✔" : " ✗";
      } else {
        a += ' ';
        a += std::to_string(s.passed);
        a += '/';
        a += std::to_string(s.n);
      }
      add_item(r.assertions, a);
    } else {
      add_item(r.scores, s.evaluator + ":" + s.label);
    }
  }
  r.duration = fmt("%.3fs", c.duration_seconds);
  return r;
}

Row averages_row(const EvalReport& report) {
  Row r;
  r.name = "averages (" + std::to_string(report.cases.size()) + " cases)";
  for (const AverageRecord& a : report.averages) {
    const std::string v = short_number(a.mean) + "±" + short_number(a.standard_error);
    if (a.kind == OutcomeKind::kScore) {
      add_item(r.scores, a.evaluator + "=" + v);
    } else {
      add_item(r.assertions, a.evaluator + "=" + v);
    }
  }
  double total = 0;
  for (const CaseRecord& c : report.cases) total += c.duration_seconds;
  r.duration =
      fmt("%.3fs", total / std::max<double>(1.0, static_cast<double>(report.cases.size())));
  return r;
}

size_t display_width(const std::string& s) {
  size_t n = 0;
  for (unsigned char ch : s) n += (ch & 0xC0) != 0x80;
  return n;
}

std::vector<std::string> row_cells(const Row& r) {
  return {r.name, r.inputs, r.expected, r.output, r.scores, r.assertions, r.duration};
}

const std::vector<std::string> kHeader = {"case",   "inputs",     "expected", "output",
                                          "scores", "assertions", "duration"};

std::string report_header_line(const EvalReport& r) {
  return "suite '" + r.suite + "' (" + r.suite_path + ") on " + r.checkpoint + ", seed " +
         std::to_string(r.seed) + ", repeats " + std::to_string(r.repeats) + ", " +
         std::to_string(r.threads) + (r.threads == 1 ? " worker, " : " workers, ") +
         fmt("%.2f", r.duration_seconds) + " s";
}

}  // namespace

std::string report_table(const EvalReport& report) {
  std::vector<std::vector<std::string>> rows;
  rows.push_back(kHeader);
  for (const CaseRecord& c : report.cases) rows.push_back(row_cells(case_row(c, 32)));
  rows.push_back(row_cells(averages_row(report)));
  std::vector<size_t> w(kHeader.size(), 0);
  for (const auto& row : rows) {
    for (size_t i = 0; i < row.size(); ++i) w[i] = std::max(w[i], display_width(row[i]));
  }
  auto line = [&](const std::vector<std::string>& row) {
    std::string s;
    for (size_t i = 0; i < row.size(); ++i) {
      s += row[i] + std::string(w[i] - display_width(row[i]), ' ');
      s += i + 1 < row.size() ? " │ " : "\n";
    }
    return s;
  };
  auto rule = [&] {
    std::string s;
    for (size_t i = 0; i < w.size(); ++i) {
      for (size_t k = 0; k < w[i]; ++k) s += "─";
      s += i + 1 < w.size() ? "─┼─" : "\n";
    }
    return s;
  };
  std::string out = report_header_line(report) + "\n" + line(rows.front()) + rule();
  for (size_t i = 1; i + 1 < rows.size(); ++i) out += line(rows[i]);
  out += rule() + line(rows.back());
  return out;
}

std::string report_markdown(const EvalReport& report) {
  std::string out = "# Evaluation: " + one_line(report.suite, 200) + "\n\n" +
                    one_line(report_header_line(report), 1000) + "\n\n## Averages\n\n" +
                    "| evaluator | kind | cases | mean | standard error | pass rate | pass@k |\n" +
                    "|---|---|---|---|---|---|---|\n";
  for (const AverageRecord& a : report.averages) {
    std::string pk;
    for (const auto& [k, v] : a.pass_at_k) {
      pk += (pk.empty() ? "" : ", ") + ("pass@" + std::to_string(k)) + "=" + short_number(v);
    }
    out += "| " + a.evaluator + " | " + std::string(outcome_kind_name(a.kind)) + " | " +
           std::to_string(a.cases) + " | " + short_number(a.mean) + " | " +
           short_number(a.standard_error) + " | " +
           (a.kind == OutcomeKind::kAssertion ? short_number(a.pass_rate) : "") + " | " + pk +
           " |\n";
  }
  out += "\n## Cases\n\n| " + kHeader[0];
  for (size_t i = 1; i < kHeader.size(); ++i) out += " | " + kHeader[i];
  out += " |\n|";
  for (size_t i = 0; i < kHeader.size(); ++i) out += "---|";
  out += "\n";
  for (const CaseRecord& c : report.cases) {
    const auto cells = row_cells(case_row(c, 80));
    out += "|";
    for (const auto& cell : cells) out += " " + cell + " |";
    out += "\n";
  }
  const auto avg = row_cells(averages_row(report));
  out += "|";
  for (const auto& cell : avg) out += cell.empty() ? " |" : " **" + cell + "** |";
  out += "\n";
  return out;
}

}  // namespace nanogpt
