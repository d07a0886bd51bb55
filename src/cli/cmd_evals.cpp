// `nanogpt evals ...`: evaluation suites (src/eval/suite.hpp). `make-suite` writes a built-in
// task suite, `make-suites` one per family and level; `tasks` lists the task families and their
// levels; `check` loads a suite file and reports what it holds (every error names the file, case
// and field).
#include <cstdio>
#include <memory>

#include "cli/commands.hpp"
#include "cli/number_range.hpp"
#include "eval/suite.hpp"
#include "eval/task_registry.hpp"
#include "eval/task_suite.hpp"
#include "runtime/error.hpp"
#include "runtime/file_io.hpp"

namespace nanogpt::cli {

namespace {

void register_make_suite(CLI::App& evals) {
  auto* cmd = evals.add_subcommand(
      "make-suite", "Write a suite of one task family at one level (few-shot prompts, verifier)");
  struct Args {
    std::string task, split = "test", out;
    int level = 1;
    int64_t cases = 100;
    int64_t seed = 0;  // int64_t: CLI11 would wrap a negative value into a uint64_t
    int shots = 3;
    int64_t samples = 1;
    int64_t max_tokens = 64;
    double temperature = 0;
    int64_t top_k = 0;
  };
  auto a = std::make_shared<Args>();
  cmd->add_option("--task", a->task, "Task family (`nanogpt evals tasks` lists them)")->required();
  cmd->add_option("--level", a->level, "Difficulty level")->capture_default_str();
  cmd->add_option("--cases", a->cases, "Number of distinct problems")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 24));
  cmd->add_option("--split", a->split, "train or test")->capture_default_str();
  cmd->add_option("--seed", a->seed, "Seed of the problem stream and the few-shot examples")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--shots", a->shots, "Solved train examples before each question")
      ->capture_default_str()
      ->check(CLI::Range(0, 64));
  cmd->add_option("--samples", a->samples, "Completions per case (pass@k)")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  cmd->add_option("--max-tokens", a->max_tokens, "Token limit per completion (stop: newline)")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  cmd->add_option("--temperature", a->temperature,
                  "Softmax temperature; 0 is greedy (more than one sample needs more than 0)")
      ->capture_default_str()
      ->check(finite_in_range(0.0, 100.0));
  cmd->add_option("--top-k", a->top_k, "Sample among the k most likely tokens (0: all)")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 30));
  cmd->add_option("--out", a->out, "The suite file to write")->required();
  cmd->callback([a] {
    TaskSuiteOptions o;
    o.family = a->task;
    o.level = a->level;
    o.cases = a->cases;
    o.split = parse_task_split(a->split);
    o.seed = static_cast<uint64_t>(a->seed);
    o.shots = a->shots;
    o.samples = a->samples;
    o.max_tokens = a->max_tokens;
    o.temperature = a->temperature;
    o.top_k = a->top_k;
    const Suite s = make_task_suite(o);
    save_suite(s, a->out);
    std::printf("wrote %s: suite '%s', %zu cases (%s)\n", a->out.c_str(), s.name.c_str(),
                s.cases.size(), s.description.c_str());
  });
}

void register_make_suites(CLI::App& evals) {
  auto* cmd = evals.add_subcommand("make-suites",
                                   "Write one task suite per family and level into a directory");
  struct Args {
    std::string out_dir, split = "test";
    int64_t cases = 100;
    int64_t seed = 0;
    int shots = 3;
  };
  auto a = std::make_shared<Args>();
  cmd->add_option("--out-dir", a->out_dir, "Directory for FAMILY-lLEVEL.json (must exist)")
      ->required()
      ->check(CLI::ExistingDirectory);
  cmd->add_option("--cases", a->cases, "Problems per suite (fewer where a level has fewer)")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 24));
  cmd->add_option("--split", a->split, "train or test")->capture_default_str();
  cmd->add_option("--seed", a->seed, "Seed of the problem streams")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--shots", a->shots, "Solved train examples before each question")
      ->capture_default_str()
      ->check(CLI::Range(0, 64));
  cmd->callback([a] {
    for (const std::string& family : task_family_names()) {
      for (int level = 1; level <= task_family(family).levels(); ++level) {
        TaskSuiteOptions o;
        o.family = family;
        o.level = level;
        o.cases = a->cases;
        o.split = parse_task_split(a->split);
        o.seed = static_cast<uint64_t>(a->seed);
        o.shots = a->shots;
        o.allow_fewer = true;
        const Suite s = make_task_suite(o);
        const std::string path = a->out_dir + "/" + family + "-l" + std::to_string(level) + ".json";
        save_suite(s, path);
        std::printf("%s: %zu cases\n", path.c_str(), s.cases.size());
      }
    }
  });
}

void register_tasks(CLI::App& evals) {
  auto* cmd = evals.add_subcommand("tasks", "List the task families and their levels");
  cmd->callback([] {
    for (const std::string& name : task_family_names()) {
      const TaskFamily& f = task_family(name);
      std::printf("%s (levels 1..%d)\n", name.c_str(), f.levels());
      for (int level = 1; level <= f.levels(); ++level) {
        const TaskInstance t = generate_task(name, level, TaskSplit::kTrain, 0, 0);
        std::printf("  %d: %s — e.g. %s -> %s\n", level, f.level_description(level).c_str(),
                    t.question.c_str(), t.answer.c_str());
      }
    }
  });
}

void register_check(CLI::App& evals) {
  auto* cmd = evals.add_subcommand("check", "Load a suite file and summarise it");
  auto path = std::make_shared<std::string>();
  cmd->add_option("SUITE", *path, "The suite file")->required();
  cmd->callback([path] {
    const Suite s = load_suite(*path);
    size_t kinds[3] = {0, 0, 0};
    for (const SuiteCase& c : s.cases) ++kinds[static_cast<int>(c.kind)];
    std::printf(
        "suite '%s': %zu cases (%zu text, %zu choice, %zu generate), %zu suite-level "
        "evaluators\n",
        s.name.c_str(), s.cases.size(), kinds[static_cast<int>(CaseKind::kText)],
        kinds[static_cast<int>(CaseKind::kChoice)], kinds[static_cast<int>(CaseKind::kGenerate)],
        s.evaluators.size());
  });
}

}  // namespace

void register_evals(CLI::App& app) {
  auto* evals = app.add_subcommand(
      "evals", "Evaluation suites: task suites, checks (suite files: docs/eval_suite.schema.json)");
  evals->require_subcommand(1);
  register_make_suite(*evals);
  register_make_suites(*evals);
  register_tasks(*evals);
  register_check(*evals);
}

}  // namespace nanogpt::cli
