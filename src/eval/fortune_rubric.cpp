#include "eval/fortune_rubric.hpp"

#include <nlohmann/json.hpp>
#include <vector>

namespace nanogpt {

namespace {

using Json = nlohmann::ordered_json;

struct FortuneTopic {
  const char* name;                // the prompt's name
  const char* topic;               // as the prompt says it
  std::vector<const char*> words;  // any of them, as a whole word, optionally plural
};

const std::vector<FortuneTopic>& topics() {
  static const std::vector<FortuneTopic> list = {
      {"computers", "computers", {"computer", "software", "program", "machine", "code"}},
      {"love", "love", {"love", "loved", "heart", "romance"}},
      {"money", "money", {"money", "wealth", "rich", "riches", "gold", "coin"}},
      {"work", "work", {"work", "job", "career", "office", "boss"}},
      {"friendship", "friendship", {"friend", "friendship"}},
      {"future", "the future", {"future", "tomorrow"}},
      {"travel", "travel", {"travel", "journey", "trip", "road"}},
      {"cats", "cats", {"cat", "kitten"}},
      {"sea", "the sea", {"sea", "ocean", "wave", "ship"}},
      {"food", "food", {"food", "meal", "eat", "dinner", "bread"}},
      {"time", "time", {"time", "hour", "day", "clock"}},
      {"luck", "luck", {"luck", "lucky", "chance"}},
  };
  return list;
}

Json criterion(const char* name, const std::string& description, const char* cls, Json check) {
  return Json{{"name", name}, {"description", description}, {"class", cls}, {"check", check}};
}

}  // namespace

std::string builtin_fortune_rubric_json() {
  Json criteria = Json::array();
  criteria.push_back(criterion("length", "The answer is a short fortune: 3 to 60 words.",
                               "essential",
                               {{"type", "length"}, {"unit", "words"}, {"min", 3}, {"max", 60}}));
  criteria.push_back(criterion(
      "no-repetition",
      "The answer does not repeat itself: at most 10% of its word 3-grams repeat an earlier one.",
      "important", {{"type", "ngram_repetition"}, {"n", 3}, {"max_fraction", 0.1}}));
  criteria.push_back(criterion(
      "ends-a-sentence",
      "The answer ends with sentence punctuation (. ! or ?), perhaps then a closing quote or "
      "bracket.",
      "optional", {{"type", "regex"}, {"pattern", R"([.!?]["')\]]*\s*$)"}, {"lines", "last"}}));
  criteria.push_back(criterion(
      "prompt-leak",
      "The answer repeats the prompt, starts a new \"Question:\" or \"Answer:\", or contains "
      "special-token text such as \"<|\".",
      "pitfall",
      {{"type", "contains"},
       {"values", {"Question:", "Answer:", "<|"}},
       {"include_prompt", true}}));
  Json prompts = Json::array();
  for (const FortuneTopic& t : topics()) {
    // Appended piece by piece: GCC 12 warns falsely (-Wrestrict) on "..." + std::string(...).
    std::string alternatives;
    for (const char* w : t.words) {
      if (!alternatives.empty()) alternatives += '|';
      alternatives += w;
    }
    Json mentions =
        criterion("mentions-topic",
                  "The answer is about " + std::string(t.topic) + ": it mentions it.", "important",
                  {{"type", "regex"},
                   {"pattern", "\\b(?:" + alternatives + ")s?\\b"},
                   {"ignore_case", true}});
    prompts.push_back({{"name", t.name},
                       {"prompt", "Tell me a short fortune about " + std::string(t.topic) + "."},
                       {"criteria", {mentions}}});
  }
  const Json rubric = {
      {"name", kFortuneRubricName},
      {"description",
       "Open-ended fortune-style answers, checked without a judge: length, repetition, the "
       "topic, a finished sentence, no leaked prompt format (src/eval/fortune_rubric.hpp)."},
      {"criteria", criteria},
      {"prompts", prompts}};
  return rubric.dump(2) + "\n";
}

Rubric builtin_fortune_rubric() {
  return parse_rubric(builtin_fortune_rubric_json(), std::string("builtin:") + kFortuneRubricName);
}

}  // namespace nanogpt
