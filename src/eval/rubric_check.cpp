#include "eval/rubric_check.hpp"

#include <cctype>
#include <cmath>
#include <cstdio>
#include <set>

#include "data/unicode_class.hpp"
#include "data/utf8.hpp"
#include "eval/evaluator_metrics.hpp"
#include "eval/line_regex.hpp"
#include "eval/number_text.hpp"
#include "eval/task_family.hpp"
#include "eval/task_registry.hpp"
#include "runtime/error.hpp"

namespace nanogpt {

namespace {

// A short quotation of a response or value for reasons.
std::string quote(std::string_view s) {
  constexpr size_t kMax = 60;
  return "'" + (s.size() > kMax ? std::string(s.substr(0, kMax)) + "..." : std::string(s)) + "'";
}

std::string format_number(double x) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.6g", x);
  return buf;
}

std::string ascii_lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

CheckOutcome verdict(bool satisfied, std::string reason) {
  return CheckOutcome{satisfied, satisfied ? 1.0 : 0.0, std::move(reason)};
}

CheckOutcome run_contains(const ContainsCheck& c, const RubricItem& item,
                          std::string_view response) {
  std::vector<std::string> values = c.values;
  if (c.include_prompt) values.push_back(item.prompt);
  const std::string text = c.ignore_case ? ascii_lower(response) : std::string(response);
  std::vector<std::string> found, missing;
  for (const std::string& v : values) {
    const std::string needle = c.ignore_case ? ascii_lower(v) : v;
    (text.find(needle) != std::string::npos ? found : missing).push_back(v);
  }
  if (c.match_all) {
    if (missing.empty()) return verdict(true, "contains all " + std::to_string(values.size()));
    return verdict(
        false,
        "lacks " + quote(missing.front()) +
            (missing.size() > 1 ? " and " + std::to_string(missing.size() - 1) + " more" : ""));
  }
  if (!found.empty()) return verdict(true, "contains " + quote(found.front()));
  return verdict(false, "contains none of the " + std::to_string(values.size()) + " values");
}

CheckOutcome run_regex(const RegexCheck& r, std::string_view response) {
  if (r.compiled == nullptr) throw Error("regex check /" + r.pattern + "/ was never compiled");
  std::string_view text = response;
  if (r.last_line) {
    // The last line with a non-blank character.
    size_t end = response.size();
    text = {};
    while (true) {
      const size_t nl = end == 0 ? std::string_view::npos : response.rfind('\n', end - 1);
      const size_t start = nl == std::string_view::npos ? 0 : nl + 1;
      const std::string_view line = response.substr(start, end - start);
      if (!trim(line).empty()) {
        text = line;
        break;
      }
      if (start == 0) break;
      end = start - 1;
    }
  }
  std::optional<std::string> match;
  for_each_line_match(*r.compiled, text, [&](const std::smatch& m) {
    match = m.str();
    return false;
  });
  const std::string scope = r.last_line ? "the last line" : "the response";
  if (match) return verdict(true, "/" + r.pattern + "/ matches " + quote(*match));
  return verdict(false, "/" + r.pattern + "/ does not match in " + scope);
}

CheckOutcome run_length(const LengthCheck& l, std::string_view response) {
  const std::string_view t = trim(response);
  const bool words = l.unit == LengthUnit::kWords;
  const int64_t n = words ? static_cast<int64_t>(response_words(t).size()) : utf8_characters(t);
  const std::string count = std::to_string(n) + (words ? " words" : " characters");
  if (l.min && n < *l.min)
    return verdict(false, count + ", fewer than the minimum " + std::to_string(*l.min));
  if (l.max && n > *l.max)
    return verdict(false, count + ", more than the maximum " + std::to_string(*l.max));
  if (l.min && l.max) {
    return verdict(
        true, count + ", within [" + std::to_string(*l.min) + ", " + std::to_string(*l.max) + "]");
  }
  return verdict(true, count + (l.min ? ", at least " + std::to_string(*l.min)
                                      : ", at most " + std::to_string(*l.max)));
}

CheckOutcome run_ngram(const NgramRepetitionCheck& g, std::string_view response) {
  const std::vector<std::string> words = response_words(response);
  const double f = repeated_ngram_fraction(words, g.n);
  const bool ok = f <= g.max_fraction;
  const std::string n = std::to_string(g.n);
  if (static_cast<int64_t>(words.size()) < g.n) {
    return verdict(true, std::to_string(words.size()) + " words: no " + n + "-gram to repeat");
  }
  return verdict(ok, format_number(f) + " of the " + n + "-grams repeat an earlier one" +
                         (ok ? " (at most " : " (more than ") + format_number(g.max_fraction) +
                         ")");
}

CheckOutcome run_numeric(const NumericCheck& c, std::string_view response) {
  const std::optional<double> got = last_number(response);
  if (!got) return verdict(false, "no number in " + quote(response));
  const bool ok = std::abs(*got - c.value) <= c.tolerance;
  return verdict(ok, "the last number " + format_number(*got) +
                         (ok ? " is within " : " is not within ") + format_number(c.tolerance) +
                         " of " + format_number(c.value));
}

CheckOutcome run_verifier(const VerifierCheck& v, const RubricItem& item,
                          std::string_view response) {
  if (!item.task) {
    throw Error("verifier check of " + v.task + " on prompt '" + item.name + "' without a task");
  }
  const Reward reward = verify(*item.task, response);
  return CheckOutcome{reward.value >= v.min_reward, reward.value,
                      reward.reason + " (reward " + format_number(reward.value) + ")"};
}

}  // namespace

CheckOutcome run_check(const RubricCheck& check, const RubricItem& item,
                       std::string_view response) {
  if (const auto* c = std::get_if<ContainsCheck>(&check)) return run_contains(*c, item, response);
  if (const auto* r = std::get_if<RegexCheck>(&check)) return run_regex(*r, response);
  if (const auto* l = std::get_if<LengthCheck>(&check)) return run_length(*l, response);
  if (const auto* g = std::get_if<NgramRepetitionCheck>(&check)) return run_ngram(*g, response);
  if (const auto* n = std::get_if<NumericCheck>(&check)) return run_numeric(*n, response);
  if (const auto* v = std::get_if<VerifierCheck>(&check)) return run_verifier(*v, item, response);
  throw Error("run_check: a judge check is asked of a RubricJudge (judge_check_outcome)");
}

CheckOutcome judge_check_outcome(double p) {
  CheckOutcome o;
  o.score = p;
  o.satisfied = p >= 0.5;
  o.reason = "the judge answers Yes with probability " + format_number(p);
  return o;
}

std::vector<std::string> response_words(std::string_view text) {
  std::vector<std::string> words;
  // Byte ranges of the current run's first and last letter or number (npos: none yet).
  size_t first = std::string_view::npos, last_end = 0;
  const auto close_run = [&] {
    if (first != std::string_view::npos) words.emplace_back(text.substr(first, last_end - first));
    first = std::string_view::npos;
  };
  for (size_t i = 0; i < text.size();) {
    uint32_t cp = 0;
    const int n = decode_utf8(text, i, &cp);
    const size_t len = n > 0 ? static_cast<size_t>(n) : 1;  // an invalid byte: a symbol
    const CharClass c = n > 0 ? classify_code_point(cp) : CharClass::kOther;
    if (c == CharClass::kWhitespace) {
      close_run();
    } else if (c == CharClass::kLetter || c == CharClass::kNumber) {
      if (first == std::string_view::npos) first = i;
      last_end = i + len;
    }
    i += len;
  }
  close_run();
  return words;
}

double repeated_ngram_fraction(const std::vector<std::string>& words, int64_t n) {
  if (n < 1 || static_cast<int64_t>(words.size()) < n) return 0;
  const size_t count = words.size() - static_cast<size_t>(n) + 1;
  std::set<std::string> distinct;
  for (size_t i = 0; i < count; ++i) {
    std::string gram;
    for (size_t j = i; j < i + static_cast<size_t>(n); ++j) {
      gram += ascii_lower(words[j]);
      gram += '\0';  // no word contains it, so "a b"+"c" differs from "a"+"b c"
    }
    distinct.insert(std::move(gram));
  }
  return static_cast<double>(count - distinct.size()) / static_cast<double>(count);
}

std::optional<double> last_number(std::string_view text) {
  static const std::regex number{std::string(kNumberPattern), std::regex::ECMAScript};
  std::optional<std::string> found;
  for_each_line_match(number, text, [&](const std::smatch& m) {
    found = m.str();
    return true;
  });
  return found ? parse_number(*found) : std::nullopt;
}

}  // namespace nanogpt
