// `nanogpt evals ...`: evaluation suites (src/eval/suite.hpp). `make-suite` writes a built-in
// task suite or a fortunes suite, `make-suites` one per family and level; `tasks` lists the task
// families and their levels; `check` loads a suite file and reports what it holds (every error
// names the file, case and field); `run` scores a checkpoint on a suite (eval/suite_runner.hpp)
// and writes its report; `compare` diffs two reports (eval/report_compare.hpp); `add-failures`
// keeps a report's failed cases as a regression suite; `rubric` scores responses with a rubric
// (eval/rubric.hpp) and prints each criterion's rate, `make-rubric` writes the built-in one.
#include <chrono>
#include <cstdio>
#include <limits>
#include <memory>
#include <set>

#include "cli/commands.hpp"
#include "cli/number_range.hpp"
#include "cli/suite_on_checkpoint.hpp"
#include "config/config.hpp"
#include "data/bpe_tokenizer.hpp"
#include "eval/eval_report.hpp"
#include "eval/fortune_rubric.hpp"
#include "eval/fortunes_suites.hpp"
#include "eval/model_scorer.hpp"
#include "eval/report_compare.hpp"
#include "eval/rubric.hpp"
#include "eval/rubric_judge.hpp"
#include "eval/rubric_rates.hpp"
#include "eval/rubric_responses.hpp"
#include "eval/rubric_score.hpp"
#include "eval/suite.hpp"
#include "eval/suite_runner.hpp"
#include "eval/task_registry.hpp"
#include "eval/task_suite.hpp"
#include "model/model_io.hpp"
#include "posttrain/checkpoint_judge.hpp"
#include "runtime/error.hpp"
#include "runtime/file_io.hpp"
#include "runtime/profiler.hpp"
#include "runtime/progress_bar.hpp"
#include "runtime/thread_pool.hpp"
#include "train/attention_window.hpp"
#include "train/train_state.hpp"

namespace nanogpt::cli {

namespace {

void register_make_suite(CLI::App& evals) {
  auto* cmd = evals.add_subcommand(
      "make-suite",
      "Write a suite of one task family at one level (few-shot prompts, verifier), or a built-in "
      "fortunes suite (--builtin fortunes-bpb|fortunes-choice)");
  struct Args {
    std::string task, builtin, data = "data/fortunes", tokenizer, split = "test", out;
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
  auto* task = cmd->add_option("--task", a->task, "Task family (`nanogpt evals tasks` lists them)");
  auto* builtin = cmd->add_option("--builtin", a->builtin,
                                  "A fortunes suite from the held-out (validation) documents")
                      ->check(CLI::IsMember({"fortunes-bpb", "fortunes-choice"}))
                      ->excludes(task);
  task->excludes(builtin);
  cmd->add_option("--data", a->data,
                  "fortunes: the prepared corpus directory (shards/val_*.bin, tokenizer.json)")
      ->capture_default_str();
  cmd->add_option("--tokenizer", a->tokenizer,
                  "fortunes: the tokenizer (default: DATA/tokenizer.json), recorded in the suite");
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
    if (!a->builtin.empty()) {
      const std::string spec = a->tokenizer.empty() ? a->data + "/tokenizer.json" : a->tokenizer;
      const BpeTokenizer tok = BpeTokenizer::load(spec);
      FortunesSuiteOptions o;
      o.cases = a->cases;
      o.seed = static_cast<uint64_t>(a->seed);
      o.tokenizer = spec;
      const auto docs = shard_documents(a->data + "/shards/val_*.bin", tok);
      const Suite s = a->builtin == "fortunes-bpb" ? make_fortunes_bpb_suite(docs, o)
                                                   : make_fortunes_choice_suite(docs, o);
      save_suite(s, a->out);
      std::printf("wrote %s: suite '%s', %zu cases from %zu held-out fortunes\n", a->out.c_str(),
                  s.name.c_str(), s.cases.size(), docs.size());
      return;
    }
    if (a->task.empty()) throw InputError("make-suite needs --task FAMILY or --builtin NAME");
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

// A line on stderr redrawn in place, only on a terminal.
class ProgressLine {
 public:
  explicit ProgressLine(std::string label)
      : label_(std::move(label)),
        enabled_(ProgressBar::stderr_is_terminal()),
        start_(std::chrono::steady_clock::now()) {}
  void update(size_t done, size_t total) {
    if (!enabled_) return;
    const double s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    const double rate = s > 0 ? static_cast<double>(done) / s : 0;
    const double eta = rate > 0 ? static_cast<double>(total - done) / rate : 0;
    std::fprintf(stderr, "\r%s: %zu/%zu cases, %.2f cases/s, %.0f s left   ", label_.c_str(), done,
                 total, rate, eta);
    if (done == total) std::fputc('\n', stderr);
    std::fflush(stderr);
  }

 private:
  std::string label_;
  bool enabled_;
  std::chrono::steady_clock::time_point start_;
};

void register_run(CLI::App& evals) {
  auto* cmd = evals.add_subcommand("run", "Score a checkpoint on a suite; print and save a report");
  struct Args {
    std::string suite, checkpoint, tokenizer, report_json, report_md;
    int64_t seed = 0;
    int threads = 0;
    int64_t repeats = 1;
    int64_t warmup = 0;
    int64_t window = 0;
    std::string precision, profile;
    bool quiet = false;
  };
  auto a = std::make_shared<Args>();
  cmd->add_option("SUITE", a->suite, "The suite file")->required();
  cmd->add_option("--checkpoint", a->checkpoint,
                  "A checkpoint directory, or a run directory (its newest checkpoint)")
      ->required();
  cmd->add_option("--seed", a->seed, "Seed of the sampled completions")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{0}, std::numeric_limits<int64_t>::max()));
  cmd->add_option("--threads", a->threads,
                  "Cases run side by side, each on its own model copy with single-threaded "
                  "kernels; 1 runs cases one by one on every thread (default: 1)")
      ->check(CLI::Range(1, 1024));
  cmd->add_option("--repeats", a->repeats,
                  "Completions per sampled generate case are samples x repeats (pass@k, mean@n)")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  cmd->add_option("--warmup", a->warmup,
                  "Score the first N cases once before the run, untimed, results dropped: "
                  "durations then leave out one-time costs (packing the weights, first "
                  "touches). For benchmarks; outputs do not change")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 30));
  cmd->add_option("--tokenizer", a->tokenizer,
                  "Tokenizer (default: the one recorded with the checkpoint's training data)");
  add_checkpoint_window_option(cmd, a->window);
  cmd->add_option("--precision", a->precision,
                  "Products in fp32 or bf16 (default: what the checkpoint's configuration "
                  "resolves to on this CPU)")
      ->check(CLI::IsMember({"fp32", "bf16", "auto"}));
  cmd->add_option("--report-json", a->report_json, "Write the full report here (JSON)");
  cmd->add_option("--report-md", a->report_md, "Write the report here (Markdown)");
  cmd->add_flag("--quiet", a->quiet, "No table on stdout (the averages only)");
  cmd->add_option("--profile", a->profile,
                  "Write a Chrome trace of the run to this file (open in ui.perfetto.dev) and "
                  "print where the time went to stderr");
  cmd->callback([a] {
    const Suite suite = load_suite(a->suite);
    CheckpointRun run;
    run.checkpoint = a->checkpoint;
    run.tokenizer = a->tokenizer;
    run.precision = a->precision;
    run.window = a->window;
    run.threads = a->threads;
    SuiteRunOptions o;
    o.seed = static_cast<uint64_t>(a->seed);
    o.repeats = a->repeats;
    o.warmup_cases = a->warmup;
    ProgressLine progress("evals run " + suite.name);
    o.progress = [&progress](size_t done, size_t total) { progress.update(done, total); };
    ProfileSession profile(a->profile);
    int workers = 1;
    EvalReport report = run_suite_on_checkpoint(suite, run, o, &workers);
    profile.finish();
    if (!a->report_json.empty()) save_report(report, a->report_json);
    if (!a->report_md.empty()) write_file_atomic(a->report_md, report_markdown(report));
    if (a->quiet) {
      for (const AverageRecord& r : report.averages) {
        std::printf("%s: %.6g ± %.3g over %lld cases\n", r.evaluator.c_str(), r.mean,
                    r.standard_error, static_cast<long long>(r.cases));
      }
    } else {
      std::fputs(report_table(report).c_str(), stdout);
    }
    int64_t generated = 0;
    for (const CaseRecord& cr : report.cases) {
      for (const SampleRecord& sr : cr.samples) generated += sr.generated_tokens;
    }
    std::printf("%zu cases in %.2f s (%.2f cases/s", report.cases.size(), report.duration_seconds,
                static_cast<double>(report.cases.size()) / report.duration_seconds);
    if (generated > 0) {
      std::printf(", %lld tokens generated, %.1f tokens/s", static_cast<long long>(generated),
                  static_cast<double>(generated) / report.duration_seconds);
    }
    std::printf(", %d worker%s)\n", workers, workers == 1 ? "" : "s");
  });
}

void register_compare(CLI::App& evals) {
  auto* cmd = evals.add_subcommand("compare", "Compare two reports of a suite (OLD, NEW)");
  struct Args {
    std::string old_path, new_path;
    int64_t resamples = 10000;
    int64_t seed = 0;
  };
  auto a = std::make_shared<Args>();
  cmd->add_option("OLD", a->old_path, "The baseline report (JSON)")->required();
  cmd->add_option("NEW", a->new_path, "The new report (JSON)")->required();
  cmd->add_option("--resamples", a->resamples, "Paired bootstrap resamples")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{100}, int64_t{10000000}));
  cmd->add_option("--seed", a->seed, "Seed of the bootstrap")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{0}, std::numeric_limits<int64_t>::max()));
  cmd->callback([a] {
    const EvalReport o = load_report(a->old_path);
    const EvalReport n = load_report(a->new_path);
    const ReportComparison cmp =
        compare_reports(o, n, a->resamples, static_cast<uint64_t>(a->seed));
    std::fputs(comparison_text(cmp, o, n).c_str(), stdout);
  });
}

void register_add_failures(CLI::App& evals) {
  auto* cmd = evals.add_subcommand(
      "add-failures", "Keep the cases a report failed (any assertion) as a regression suite");
  struct Args {
    std::string report, suite, out;
  };
  auto a = std::make_shared<Args>();
  cmd->add_option("REPORT", a->report, "A report of `evals run` (JSON)")->required();
  cmd->add_option("SUITE", a->suite, "The suite the report ran")->required();
  cmd->add_option("--out", a->out, "The regression suite to write")->required();
  cmd->callback([a] {
    const EvalReport report = load_report(a->report);
    Suite suite = load_suite(a->suite);
    if (report.suite != suite.name) {
      throw InputError("report '" + a->report + "' is of suite '" + report.suite + "', not '" +
                       suite.name + "' ('" + a->suite + "')");
    }
    std::set<std::string> failed;
    for (const CaseRecord& c : report.cases) {
      for (const EvaluatorSummary& s : c.summaries) {
        if (s.kind == OutcomeKind::kAssertion && s.passed < s.n) failed.insert(c.name);
      }
    }
    std::set<std::string> in_suite;
    for (const SuiteCase& c : suite.cases) in_suite.insert(c.name);
    for (const std::string& name : failed) {
      if (in_suite.count(name) == 0) {
        throw InputError("report '" + a->report + "': case '" + name + "' is not in suite '" +
                         a->suite + "' (was the suite changed since the run?)");
      }
    }
    if (failed.empty()) {
      throw InputError("report '" + a->report +
                       "' has no failed case (no assertion failed): no regression suite to write");
    }
    std::vector<SuiteCase> kept;
    for (SuiteCase& c : suite.cases) {
      if (failed.count(c.name) != 0) kept.push_back(std::move(c));
    }
    suite.cases = std::move(kept);
    suite.name += "-failures";
    suite.description = "Cases of '" + report.suite + "' that " + report.checkpoint +
                        " failed (from " + a->report + ")";
    suite.path.clear();
    save_suite(suite, a->out);
    std::printf("wrote %s: suite '%s', %zu failed cases\n", a->out.c_str(), suite.name.c_str(),
                suite.cases.size());
  });
}

void register_make_rubric(CLI::App& evals) {
  auto* cmd = evals.add_subcommand("make-rubric", "Write a built-in rubric as a file to edit");
  struct Args {
    std::string builtin, out;
  };
  auto a = std::make_shared<Args>();
  cmd->add_option("--builtin", a->builtin, "The built-in rubric")
      ->required()
      ->check(CLI::IsMember({std::string(kFortuneRubricName)}));
  cmd->add_option("--out", a->out, "The rubric file to write")->required();
  cmd->callback([a] {
    const Rubric r = builtin_fortune_rubric();
    write_file_atomic(a->out, builtin_fortune_rubric_json());
    std::printf("wrote %s: rubric '%s', %zu criteria and %zu prompts\n", a->out.c_str(),
                r.name.c_str(), r.criteria.size(), r.prompts.size());
  });
}

void register_rubric(CLI::App& evals) {
  auto* cmd = evals.add_subcommand(
      "rubric",
      "Score responses with a rubric (docs/rubric.schema.json): each criterion's rate and the "
      "mean reward, optionally against responses from before");
  struct Args {
    std::string rubric, responses, before, judge, tokenizer, scores;
    int64_t window = 0;
  };
  auto a = std::make_shared<Args>();
  cmd->add_option("RUBRIC", a->rubric, "The rubric file")->required();
  cmd->add_option("--responses", a->responses,
                  "JSON Lines: {\"prompt\": NAME, \"response\": TEXT} per line")
      ->required();
  cmd->add_option("--before", a->before,
                  "Responses from before (e.g. before reinforcement learning): rates side by side");
  cmd->add_option("--judge", a->judge,
                  "A checkpoint (or run directory) that judges the rubric's judge criteria");
  cmd->add_option("--tokenizer", a->tokenizer,
                  "The judge's tokenizer (default: the one recorded with its training data)");
  add_checkpoint_window_option(cmd, a->window);
  cmd->add_option("--scores", a->scores,
                  "Write every response's score, criterion by criterion, here (JSON Lines)");
  cmd->callback([a] {
    const Rubric rubric = load_rubric(a->rubric);
    std::unique_ptr<CheckpointJudge> judge;
    if (!a->judge.empty()) {
      judge = std::make_unique<CheckpointJudge>(a->judge, a->tokenizer, a->window);
    } else if (rubric_uses_judge(rubric)) {
      throw InputError("rubric '" + a->rubric +
                       "' has judge criteria and no judge is configured: pass --judge CHECKPOINT");
    }
    const auto rates_of = [&](const std::string& path, std::vector<RubricScore>* keep) {
      const std::vector<PromptResponse> responses = load_rubric_responses(path, rubric);
      std::vector<RubricScore> scores = score_responses(rubric, rubric_responses_view(responses),
                                                        judge ? &judge->judge() : nullptr);
      const RubricRates rates = rubric_rates(scores);
      if (keep != nullptr) *keep = std::move(scores);
      return rates;
    };
    std::vector<RubricScore> scores;
    const RubricRates after = rates_of(a->responses, &scores);
    if (!a->scores.empty()) {
      std::string lines;
      for (const RubricScore& s : scores) lines += rubric_score_json(s).dump() + "\n";
      write_file_atomic(a->scores, lines);
    }
    std::printf("rubric '%s' on %s\n", rubric.name.c_str(), a->responses.c_str());
    if (a->before.empty()) {
      std::fputs(rubric_rates_table(after).c_str(), stdout);
    } else {
      const RubricRates before = rates_of(a->before, nullptr);
      std::printf("before: %s\n", a->before.c_str());
      std::fputs(rubric_rates_table(after, &before).c_str(), stdout);
    }
  });
}

}  // namespace

void register_evals(CLI::App& app) {
  auto* evals = app.add_subcommand(
      "evals",
      "Evaluation suites: make, check, run on a checkpoint, compare reports (suite files: "
      "docs/eval_suite.schema.json); rubrics score responses (docs/rubric.schema.json)");
  evals->require_subcommand(1);
  register_make_suite(*evals);
  register_make_suites(*evals);
  register_tasks(*evals);
  register_check(*evals);
  register_run(*evals);
  register_compare(*evals);
  register_add_failures(*evals);
  register_rubric(*evals);
  register_make_rubric(*evals);
}

}  // namespace nanogpt::cli
