#include "eval/task_registry.hpp"

#include <memory>
#include <unordered_set>

#include "eval/task_arithmetic.hpp"
#include "eval/task_countdown.hpp"
#include "eval/task_letter_count.hpp"
#include "eval/task_list_ops.hpp"
#include "runtime/error.hpp"

namespace nanogpt {

namespace {

constexpr uint64_t kTestShare = 4;  // one problem in kTestShare is a test problem
// Draws per instance before giving up: a split holds at least a quarter of every level's
// problems, so 10^5 draws all missing it has probability below 10^-12000 unless the level's
// whole space is in one split (tested for every level).
constexpr int kMaxDraws = 100000;

uint64_t splitmix(uint64_t z) {
  z += 0x9E3779B97F4A7C15ULL;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

uint64_t fnv1a(std::string_view s) {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (unsigned char c : s) {
    h ^= c;
    h *= 0x100000001b3ULL;
  }
  return h;
}

const std::vector<std::unique_ptr<TaskFamily>>& registry() {
  static const std::vector<std::unique_ptr<TaskFamily>> families = [] {
    std::vector<std::unique_ptr<TaskFamily>> f;
    f.push_back(make_addition_task());
    f.push_back(make_multiplication_task());
    f.push_back(make_countdown_task());
    f.push_back(make_sort_task());
    f.push_back(make_reverse_task());
    f.push_back(make_letter_count_task());
    return f;
  }();
  return families;
}

std::string known_families() {
  std::string s;
  for (const std::string& n : task_family_names()) s += (s.empty() ? "" : ", ") + n;
  return s;
}

void check_level(const TaskFamily& family, int level) {
  if (level < 1 || level > family.levels()) {
    throw InputError("task '" + std::string(family.name()) + "' has levels 1.." +
                     std::to_string(family.levels()) + ", not " + std::to_string(level));
  }
}

}  // namespace

std::string_view task_split_name(TaskSplit split) {
  return split == TaskSplit::kTrain ? "train" : "test";
}

TaskSplit parse_task_split(std::string_view name) {
  if (name == "train") return TaskSplit::kTrain;
  if (name == "test") return TaskSplit::kTest;
  throw InputError("unknown task split '" + std::string(name) + "' (use train or test)");
}

std::vector<std::string> task_family_names() {
  std::vector<std::string> names;
  for (const auto& f : registry()) names.emplace_back(f->name());
  return names;
}

const TaskFamily& task_family(std::string_view name) {
  for (const auto& f : registry()) {
    if (f->name() == name) return *f;
  }
  throw InputError("unknown task '" + std::string(name) + "' (known: " + known_families() + ")");
}

TaskSplit task_split_of(std::string_view canonical) {
  return splitmix(fnv1a(canonical)) % kTestShare == 0 ? TaskSplit::kTest : TaskSplit::kTrain;
}

TaskInstance generate_task(std::string_view family_name, int level, TaskSplit split, uint64_t seed,
                           uint64_t index) {
  const TaskFamily& family = task_family(family_name);
  check_level(family, level);
  uint64_t state = splitmix(fnv1a(family.name()) ^ seed);
  state = splitmix(state ^ static_cast<uint64_t>(level));
  state = splitmix(state ^ (split == TaskSplit::kTest ? 0x7465737400ULL : 0x747261696eULL));
  state = splitmix(state ^ index);
  Rng rng(state);
  for (int draw = 0; draw < kMaxDraws; ++draw) {
    TaskInstance t = family.draw(level, rng);
    if (task_split_of(t.canonical) != split) continue;
    t.family = std::string(family.name());
    t.level = level;
    t.split = split;
    t.prompt = zero_shot_prompt(t);
    return t;
  }
  throw Error("task '" + std::string(family.name()) + "' level " + std::to_string(level) +
              " found no " + std::string(task_split_name(split)) + " problem in " +
              std::to_string(kMaxDraws) + " draws");
}

TaskInstance task_from_canonical(std::string_view canonical, int level) {
  const size_t colon = canonical.find(':');
  if (colon == std::string_view::npos) {
    throw InputError("task instance '" + std::string(canonical) +
                     "' has no family (expected FAMILY:DATA, e.g. addition:17+25)");
  }
  const TaskFamily& family = task_family(canonical.substr(0, colon));
  check_level(family, level);
  std::optional<TaskInstance> t = family.parse(canonical.substr(colon + 1));
  if (!t || t->canonical != canonical) {
    throw InputError("task instance '" + std::string(canonical) + "' is not a " +
                     std::string(family.name()) + " problem as the generator writes it");
  }
  if (!family.fits_level(*t, level)) {
    throw InputError("task instance '" + std::string(canonical) + "' is not a level " +
                     std::to_string(level) + " problem (level " + std::to_string(level) + ": " +
                     family.level_description(level) + ")");
  }
  t->family = std::string(family.name());
  t->level = level;
  t->split = task_split_of(canonical);
  t->prompt = zero_shot_prompt(*t);
  return *t;
}

std::string zero_shot_prompt(const TaskInstance& instance) {
  return "Question: " + instance.question + "\n" + std::string(kAnswerCue);
}

std::string few_shot_prompt(const TaskInstance& instance, int k, uint64_t seed) {
  if (k < 0) throw InputError("few-shot example count must be >= 0, not " + std::to_string(k));
  const uint64_t stream = splitmix(seed ^ fnv1a(instance.canonical));
  std::string out;
  std::unordered_set<std::string> used = {instance.canonical};
  uint64_t index = 0;
  for (int shown = 0; shown < k; ++index) {
    if (index > static_cast<uint64_t>(k) * 1000 + 1000) {
      throw Error("task '" + instance.family + "' level " + std::to_string(instance.level) +
                  " has too few distinct train problems for " + std::to_string(k) + " examples");
    }
    const TaskInstance e =
        generate_task(instance.family, instance.level, TaskSplit::kTrain, stream, index);
    if (!used.insert(e.canonical).second) continue;
    out += zero_shot_prompt(e) + " " + e.answer + "\n\n";
    ++shown;
  }
  return out + zero_shot_prompt(instance);
}

std::vector<std::string> task_stop_strings() {
  return {"\n"};
}

std::string extract_answer(std::string_view completion) {
  if (const size_t q = completion.find("\nQuestion:"); q != std::string_view::npos) {
    completion = completion.substr(0, q);
  }
  std::string_view rest;
  if (const size_t a = completion.rfind(kAnswerCue); a != std::string_view::npos) {
    rest = completion.substr(a + kAnswerCue.size());
    rest = rest.substr(0, rest.find('\n'));
    return std::string(trim(rest));
  }
  size_t start = 0;
  while (start <= completion.size()) {
    size_t end = completion.find('\n', start);
    if (end == std::string_view::npos) end = completion.size();
    const std::string_view line = trim(completion.substr(start, end - start));
    if (!line.empty()) return std::string(line);
    start = end + 1;
  }
  return "";
}

Reward verify(const TaskInstance& instance, std::string_view completion) {
  const std::string answer = extract_answer(completion);
  if (answer.empty()) return {0.0, "the completion has no answer"};
  Reward r = task_family(instance.family).check(instance, answer);
  if (r.value < 0.0 || r.value > 1.0) {
    throw Error("task '" + instance.family + "' gave a reward outside [0, 1]");
  }
  return r;
}

}  // namespace nanogpt
