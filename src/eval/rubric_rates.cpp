#include "eval/rubric_rates.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>

namespace nanogpt {

namespace {

std::string format(const char* fmt, double x) {
  char buf[64];
  std::snprintf(buf, sizeof buf, fmt, x);
  return buf;
}

std::string pad(std::string s, size_t width) {
  if (s.size() < width) s.append(width - s.size(), ' ');
  return s;
}

std::string reward_line(const char* label, const RubricRates& r) {
  return std::string(label) + format("%.4f", r.mean_reward) + " ± " +
         format("%.4f", r.reward_standard_error) + " over " + std::to_string(r.responses) +
         " responses";
}

}  // namespace

RubricRates rubric_rates(std::span<const RubricScore> scores) {
  RubricRates r;
  r.responses = static_cast<int64_t>(scores.size());
  std::map<std::string, size_t> index;
  double sum = 0, sum_sq = 0;
  for (const RubricScore& s : scores) {
    sum += s.reward;
    sum_sq += s.reward * s.reward;
    for (const CriterionOutcome& o : s.criteria) {
      auto [it, inserted] = index.emplace(o.criterion, r.criteria.size());
      if (inserted) {
        CriterionRate c;
        c.criterion = o.criterion;
        c.weight_class = o.weight_class;
        c.weight = o.weight;
        r.criteria.push_back(c);
      }
      CriterionRate& c = r.criteria[it->second];
      ++c.responses;
      c.satisfied += o.satisfied ? 1 : 0;
      c.mean_score += o.score;  // a sum until the end
    }
  }
  for (CriterionRate& c : r.criteria) c.mean_score /= static_cast<double>(c.responses);
  if (r.responses > 0) {
    const double n = static_cast<double>(r.responses);
    r.mean_reward = sum / n;
    if (r.responses > 1) {
      const double var = std::max(0.0, (sum_sq - n * r.mean_reward * r.mean_reward) / (n - 1));
      r.reward_standard_error = std::sqrt(var / n);
    }
  }
  return r;
}

std::string rubric_rates_table(const RubricRates& rates, const RubricRates* before) {
  size_t width = 9;
  for (const CriterionRate& c : rates.criteria) width = std::max(width, c.criterion.size());
  if (before != nullptr) {
    for (const CriterionRate& c : before->criteria) width = std::max(width, c.criterion.size());
  }
  width += 2;
  std::string out;
  if (before == nullptr) {
    out += pad("criterion", width) + "class      weight  responses  rate    mean score\n";
    for (const CriterionRate& c : rates.criteria) {
      out += pad(c.criterion, width) + pad(std::string(weight_class_name(c.weight_class)), 11) +
             pad(format("%g", c.weight), 8) + pad(std::to_string(c.responses), 11) +
             pad(format("%.3f", c.rate()), 8) + format("%.3f", c.mean_score) + "\n";
    }
    out += reward_line("reward: ", rates);
    out +=
        "\n(rate: the share of responses meeting the criterion; for a pitfall, making the "
        "mistake)\n";
    return out;
  }
  // Criteria of either, in the order of `before` then the new ones of `rates`.
  std::vector<std::string> names;
  std::map<std::string, const CriterionRate*> old_by_name, new_by_name;
  for (const CriterionRate& c : before->criteria) {
    old_by_name[c.criterion] = &c;
    names.push_back(c.criterion);
  }
  for (const CriterionRate& c : rates.criteria) {
    new_by_name[c.criterion] = &c;
    if (old_by_name.count(c.criterion) == 0) names.push_back(c.criterion);
  }
  out += pad("criterion", width) + "class      weight  rate before  rate after  change\n";
  for (const std::string& name : names) {
    const CriterionRate* o = old_by_name.count(name) ? old_by_name[name] : nullptr;
    const CriterionRate* n = new_by_name.count(name) ? new_by_name[name] : nullptr;
    const CriterionRate& any = n != nullptr ? *n : *o;
    out += pad(name, width) + pad(std::string(weight_class_name(any.weight_class)), 11) +
           pad(format("%g", any.weight), 8) +
           pad(o != nullptr ? format("%.3f", o->rate()) : std::string("-"), 13) +
           pad(n != nullptr ? format("%.3f", n->rate()) : std::string("-"), 12) +
           (o != nullptr && n != nullptr ? format("%+.3f", n->rate() - o->rate()) : "-") + "\n";
  }
  out += reward_line("reward before: ", *before) + "\n";
  out += reward_line("reward after:  ", rates) + "\n";
  out += "change: " + format("%+.4f", rates.mean_reward - before->mean_reward) + "\n";
  out +=
      "(rate: the share of responses meeting the criterion; for a pitfall, making the "
      "mistake)\n";
  return out;
}

}  // namespace nanogpt
