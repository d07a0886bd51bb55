#include "eval/task_letter_count.hpp"

#include <algorithm>
#include <string>

namespace nanogpt {

namespace {

struct WordLength {
  size_t min, max;
};
constexpr WordLength kLevels[] = {{3, 6}, {6, 10}, {10, 15}, {15, 24}};
constexpr int kLevelCount = static_cast<int>(std::size(kLevels));
constexpr size_t kMaxParsedWord = 200;

constexpr const char* kOnsets[] = {"b",  "c",  "d",  "f",  "g",  "h",  "j",  "k",  "l",
                                   "m",  "n",  "p",  "r",  "s",  "t",  "v",  "w",  "z",
                                   "br", "ch", "st", "tr", "sh", "th", "pl", "gr", ""};
constexpr const char* kVowels[] = {"a", "e", "i", "o", "u", "y", "ee", "oo", "ai", "ea"};
constexpr const char* kCodas[] = {"", "", "", "n", "r", "s", "t", "l", "rr", "ss", "ck", "x", "q"};

template <size_t N>
const char* pick(Rng& rng, const char* const (&table)[N]) {
  return table[rng.next_u64() % N];
}

class LetterCountTask final : public TaskFamily {
 public:
  std::string_view name() const override { return "letter_count"; }
  int levels() const override { return kLevelCount; }
  std::string level_description(int level) const override {
    const WordLength& l = kLevels[level - 1];
    return "pseudo-words of " + std::to_string(l.min) + "-" + std::to_string(l.max) + " letters";
  }

  TaskInstance draw(int level, Rng& rng) const override {
    const WordLength& l = kLevels[level - 1];
    std::string word;
    for (;;) {
      word.clear();
      while (word.size() < l.min) {
        word += pick(rng, kOnsets);
        word += pick(rng, kVowels);
        word += pick(rng, kCodas);
      }
      if (word.size() <= l.max) break;
    }
    char letter;
    if (rng.next_u64() % 4 != 0) {
      letter = word[rng.next_u64() % word.size()];
    } else {
      letter = static_cast<char>('a' + rng.next_u64() % 26);
    }
    return make(word, letter);
  }

  std::optional<TaskInstance> parse(std::string_view data) const override {
    // "r@strawberry"
    if (data.size() < 3 || data[1] != '@' || data.size() - 2 > kMaxParsedWord) {
      return std::nullopt;
    }
    const auto lower = [](char c) { return c >= 'a' && c <= 'z'; };
    if (!lower(data[0])) return std::nullopt;
    const std::string_view word = data.substr(2);
    if (!std::all_of(word.begin(), word.end(), lower)) return std::nullopt;
    return make(std::string(word), data[0]);
  }

  bool fits_level(const TaskInstance& t, int level) const override {
    const WordLength& l = kLevels[level - 1];
    return t.word.size() >= l.min && t.word.size() <= l.max;
  }

  Reward check(const TaskInstance& instance, std::string_view answer) const override {
    const std::optional<int64_t> got = parse_integer_answer(answer);
    if (!got) return {0.0, "the answer '" + std::string(answer) + "' is not an integer"};
    if (*got != instance.target) {
      return {0.0, "expected " + std::to_string(instance.target) + " '" + instance.letter +
                       "' in '" + instance.word + "', got " + std::to_string(*got)};
    }
    return {1.0, "correct: " + std::to_string(*got)};
  }

 private:
  static TaskInstance make(std::string word, char letter) {
    TaskInstance t;
    t.target = std::count(word.begin(), word.end(), letter);
    t.letter = std::string(1, letter);
    t.canonical = "letter_count:" + t.letter + "@" + word;
    t.question = "How many times does the letter \"" + t.letter + "\" appear in \"" + word + "\"?";
    t.answer = std::to_string(t.target);
    t.word = std::move(word);
    return t;
  }
};

}  // namespace

std::unique_ptr<TaskFamily> make_letter_count_task() {
  return std::make_unique<LetterCountTask>();
}

}  // namespace nanogpt
