// `nanogpt leaderboard ...`: a holdout whose labels stay private, scored through a mechanism
// (kaggle, ladder, ladder-free, subsample) that decides what a submitter learns, and the
// boosting attack that shows why the mechanism matters (src/eval/).
//
// The submitter's commands (submit, show) print public answers only: never a label, never a
// submission's exact private score.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <limits>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>

#include "cli/commands.hpp"
#include "cli/number_range.hpp"
#include "cli/suite_on_checkpoint.hpp"
#include "eval/attack_plot.hpp"
#include "eval/boosting_attack.hpp"
#include "eval/holdout.hpp"
#include "eval/leaderboard_state.hpp"
#include "eval/suite.hpp"
#include "eval/suite_predictions.hpp"
#include "runtime/cpu_info.hpp"
#include "runtime/error.hpp"
#include "runtime/file_io.hpp"
#include "runtime/thread_pool.hpp"

namespace nanogpt::cli {

namespace {

std::string utc_now() {
  const std::time_t t = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

std::string describe_mechanism(const MechanismParams& p) {
  std::string s(mechanism_name(p.kind));
  char buf[64];
  if (p.kind == MechanismKind::kLadder) {
    std::snprintf(buf, sizeof buf, " (step eta %g)", p.eta);
    s += buf;
  } else if (p.kind == MechanismKind::kSubsample) {
    s += " (" + std::to_string(p.votes) + " votes per answer)";
  } else if (p.kind == MechanismKind::kLadderFree) {
    s += " (threshold: the paired standard error against the leader)";
  } else {
    s += " (the score to 5 decimals)";
  }
  return s;
}

void register_init(CLI::App& board) {
  auto* cmd = board.add_subcommand("init", "Create a leaderboard on a holdout labels file");
  struct Args {
    std::string holdout, mechanism, loss = "zero-one", state;
    double eta = 0.01;
    int64_t votes = 1000;
    int64_t seed = 0;  // int64_t: CLI11 would wrap a negative value into a uint64_t
  };
  auto a = std::make_shared<Args>();
  cmd->add_option("--holdout", a->holdout, "Labels file: one class id (0, 1, ...) per line")
      ->required()
      ->check(CLI::ExistingFile);
  cmd->add_option("--mechanism", a->mechanism, "kaggle, ladder, ladder-free or subsample")
      ->required();
  cmd->add_option("--loss", a->loss,
                  "zero-one (submissions of class ids) or brier (binary holdouts: probabilities "
                  "of class 1)")
      ->capture_default_str();
  cmd->add_option("--eta", a->eta, "ladder: the step a new score must beat the shown one by")
      ->capture_default_str()
      ->check(finite_in_range(1e-9, 1.0));
  cmd->add_option("--votes", a->votes, "subsample: votes per answer")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 30));
  auto* seed = cmd->add_option("--seed", a->seed,
                               "subsample: seed of the votes (default: from the OS, kept in the "
                               "state and never shown)")
                   ->check(CLI::Range(int64_t{0}, std::numeric_limits<int64_t>::max()));
  cmd->add_option("--state", a->state, "The leaderboard's state file to create (JSON)")->required();
  cmd->callback([a, seed] {
    if (file_exists(a->state)) {
      throw InputError("leaderboard state '" + a->state +
                       "' already exists; a board is never reset: choose another --state, or "
                       "remove the file yourself");
    }
    MechanismParams p;
    p.kind = parse_mechanism(a->mechanism);
    p.eta = a->eta;
    p.votes = a->votes;
    if (seed->count() > 0) {
      p.seed = static_cast<uint64_t>(a->seed);
    } else {
      std::random_device entropy;
      p.seed = (uint64_t{entropy()} << 32) ^ entropy();
    }
    const Holdout h = load_holdout(a->holdout);
    const LeaderboardState state = new_leaderboard(h, parse_loss_kind(a->loss), p);
    save_leaderboard_state(state, a->state);
    std::printf(
        "created leaderboard %s\n  mechanism: %s\n  loss: %s\n  holdout: %s (%lld rows, "
        "sha256 %s)\n",
        a->state.c_str(), describe_mechanism(p).c_str(),
        std::string(loss_kind_name(state.loss)).c_str(), state.holdout_path.c_str(),
        static_cast<long long>(state.rows), state.holdout_sha256.c_str());
  });
}

void register_submit(CLI::App& board) {
  auto* cmd = board.add_subcommand(
      "submit",
      "Score a predictions file, or a checkpoint run on a suite, and show its public answer");
  struct Args {
    std::string state, predictions, name, checkpoint, suite, precision;
    int64_t window = 0;
  };
  auto a = std::make_shared<Args>();
  cmd->add_option("--state", a->state, "The leaderboard's state file")->required();
  auto* predictions = cmd->add_option(
      "--predictions", a->predictions,
      "One prediction per holdout row, one per line (a class id, or a probability of class 1 "
      "on a brier board)");
  auto* checkpoint = cmd->add_option(
      "--checkpoint", a->checkpoint,
      "Instead of a predictions file: a checkpoint (or run directory) run on --suite; a row's "
      "prediction is its case's most likely choice (brier boards: the probability of choice 1 "
      "of two)");
  auto* suite = cmd->add_option("--suite", a->suite,
                                "With --checkpoint: a suite of choice cases, one per holdout row "
                                "in the holdout's order (its gold indices are not used)");
  cmd->add_option("--precision", a->precision,
                  "With --checkpoint: products in fp32 or bf16 (default: the checkpoint's)")
      ->check(CLI::IsMember({"fp32", "bf16", "auto"}));
  add_checkpoint_window_option(cmd, a->window);
  checkpoint->excludes(predictions);
  checkpoint->needs(suite);
  suite->needs(checkpoint);
  cmd->add_option("--name", a->name,
                  "A name for the submission (default: the predictions file's or the "
                  "checkpoint's name)");
  cmd->callback([a] {
    if (a->predictions.empty() && a->checkpoint.empty()) {
      throw InputError(
          "leaderboard submit needs --predictions FILE, or --checkpoint DIR with --suite FILE");
    }
    // A checkpoint runs before the board is locked (a model run takes a while, and other
    // submitters wait on the lock): what it needs of the board, its loss and its holdout, is
    // fixed when the board is created.
    std::optional<ScoredSubmission> scored;
    std::string name = a->name;
    if (!a->checkpoint.empty()) {
      const LeaderboardState given = load_leaderboard_state(a->state);
      const Holdout h = load_board_holdout(given, a->state);
      const Suite s = load_suite(a->suite);
      check_suite_for_submission(s, given.loss, h.labels.size(), a->suite);
      CheckpointRun run;
      run.checkpoint = a->checkpoint;
      run.precision = a->precision;
      run.window = a->window;
      const EvalReport report = run_suite_on_checkpoint(s, run, SuiteRunOptions{});
      scored =
          score_predictions(report.checkpoint + " on " + a->suite,
                            predictions_from_report(report, given.loss, a->suite), h, given.loss);
      if (name.empty()) name = std::filesystem::path(report.checkpoint).filename().string();
    }
    const LeaderboardLock lock(a->state);  // concurrent submits take turns
    LeaderboardState state = load_leaderboard_state(a->state);
    const Holdout h = load_board_holdout(state, a->state);
    if (!scored) {
      scored = score_submission(a->predictions, h, state.loss);
      if (name.empty()) name = std::filesystem::path(a->predictions).filename().string();
    }
    const double before = state.memory.shown;
    const bool had_leader = state.memory.has_leader;
    const SubmissionRecord rec = submit_scored(state, *scored, name, utc_now());
    save_leaderboard_state(state, a->state);
    std::printf("submission #%lld '%s': public score %.5f\n", static_cast<long long>(rec.number),
                rec.name.c_str(), rec.answer);
    const MechanismParams& p = state.mechanism;
    if (answers_best_so_far(p.kind)) {
      if (rec.leads) {
        std::printf("  it leads: the board now shows %.5f\n", rec.answer);
      } else if (had_leader) {
        if (p.kind == MechanismKind::kLadder) {
          std::printf(
              "  not better than the board's %.5f by more than eta = %g; the board is "
              "unchanged\n",
              before, p.eta);
        } else {
          std::printf(
              "  not better than the leader by more than the paired standard error; the "
              "board is unchanged at %.5f\n",
              before);
        }
      }
    } else if (p.kind == MechanismKind::kSubsample) {
      std::printf("  (the mean of %lld votes on random holdout rows)\n",
                  static_cast<long long>(p.votes));
    }
  });
}

void register_show(CLI::App& board) {
  auto* cmd = board.add_subcommand("show", "Print the public board: submissions and answers");
  auto state_path = std::make_shared<std::string>();
  cmd->add_option("--state", *state_path, "The leaderboard's state file")->required();
  cmd->callback([state_path] {
    const LeaderboardState s = load_leaderboard_state(*state_path);
    std::printf("leaderboard %s\n  mechanism: %s\n  loss: %s, %lld holdout rows\n",
                state_path->c_str(), describe_mechanism(s.mechanism).c_str(),
                std::string(loss_kind_name(s.loss)).c_str(), static_cast<long long>(s.rows));
    if (s.submissions.empty()) {
      std::printf("  no submissions yet\n");
      return;
    }
    const bool ladder = answers_best_so_far(s.mechanism.kind);
    std::printf("\n  %4s  %-20s  %-24s  %12s%s\n", "#", "time (UTC)", "name", "public score",
                ladder ? "  leads" : "");
    const SubmissionRecord* best = nullptr;
    for (const SubmissionRecord& r : s.submissions) {
      std::printf("  %4lld  %-20s  %-24s  %12.5f%s\n", static_cast<long long>(r.number),
                  r.time.c_str(), r.name.substr(0, 24).c_str(), r.answer,
                  ladder ? (r.leads ? "  *" : "") : "");
      if (ladder ? r.leads : (best == nullptr || r.answer < best->answer)) best = &r;
    }
    if (best != nullptr) {
      std::printf("\n  %s: %.5f, submission #%lld '%s'\n",
                  ladder ? "the board shows" : "best public score", best->answer,
                  static_cast<long long>(best->number), best->name.c_str());
    }
  });
}

std::vector<MechanismKind> parse_mechanism_list(const std::vector<std::string>& names) {
  std::vector<MechanismKind> kinds;
  for (const std::string& n : names) kinds.push_back(parse_mechanism(n));
  return kinds;
}

nlohmann::json point_json(const BoostingAttackPoint& p) {
  return {{"mechanism", std::string(mechanism_name(p.mechanism))},
          {"k", p.k},
          {"holdout_loss", p.holdout_loss},
          {"holdout_sd", p.holdout_sd},
          {"shown", p.shown},
          {"fresh_loss", p.fresh_loss},
          {"fresh_sd", p.fresh_sd},
          {"kept", p.kept},
          {"leaderboard_error", p.leaderboard_error}};
}

// The attack's JSON with each array element on one line: hundreds of points stay readable.
std::string dump_one_point_per_line(const nlohmann::json& j) {
  std::string out = "{";
  bool first = true;
  for (const auto& [key, value] : j.items()) {
    out += first ? "\n" : ",\n";
    first = false;
    out += "  " + nlohmann::json(key).dump() + ": ";
    if (!value.is_array()) {
      out += value.dump();
      continue;
    }
    out += "[";
    for (size_t i = 0; i < value.size(); ++i) {
      out += (i == 0 ? "\n    " : ",\n    ") + value[i].dump();
    }
    out += "\n  ]";
  }
  return out + "\n}\n";
}

void register_attack(CLI::App& board) {
  auto* cmd = board.add_subcommand(
      "attack",
      "Run Blum & Hardt's boosting attack against each mechanism on random labels; print the "
      "majority vote's holdout and fresh-data loss per k");
  struct Args {
    int64_t rows = 4000, max_k = 400, k_step = 10, seeds = 100, bound_seeds = 20;
    int64_t first_seed = 1;  // signed, so a negative value is refused rather than wrapped
    double eta = 0.01;
    int64_t votes = 1000;
    std::vector<std::string> mechanisms{"kaggle", "ladder", "ladder-free", "subsample"};
    std::vector<int64_t> bound_rows{500, 1000, 2000, 4000, 8000, 16000, 32000};
    std::string svg, json;
    bool no_bound = false;
  };
  auto a = std::make_shared<Args>();
  cmd->add_option("--rows", a->rows, "Holdout rows n")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{2}, int64_t{1} << 26));
  cmd->add_option("--max-k", a->max_k, "The largest number of random submissions")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  cmd->add_option("--k-step", a->k_step, "k runs over k-step, 2 k-step, ..., max-k")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  cmd->add_option("--seeds", a->seeds, "Independent holdouts averaged over")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  cmd->add_option("--first-seed", a->first_seed, "Seeds are first-seed, first-seed + 1, ...")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{0}, std::numeric_limits<int64_t>::max()));
  cmd->add_option("--eta", a->eta, "The ladder's step")
      ->capture_default_str()
      ->check(finite_in_range(1e-9, 1.0));
  cmd->add_option("--votes", a->votes, "The subsample mechanism's votes per answer")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 30));
  cmd->add_option("--mechanisms", a->mechanisms, "Mechanisms to attack")
      ->capture_default_str()
      ->delimiter(',');
  cmd->add_option("--bound-rows", a->bound_rows,
                  "Holdout sizes for the leaderboard error against n at k = max-k")
      ->capture_default_str()
      ->delimiter(',')
      ->check(CLI::Range(int64_t{2}, int64_t{1} << 26));
  cmd->add_option("--bound-seeds", a->bound_seeds, "Seeds per holdout size of --bound-rows")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  cmd->add_flag("--no-bound", a->no_bound, "Skip the leaderboard error against n");
  cmd->add_option("--svg", a->svg, "Write the plot here (SVG)");
  cmd->add_option("--json", a->json, "Write the table and the settings here (JSON)");
  cmd->callback([a] {
    if (a->no_bound) a->bound_rows.clear();
    BoostingAttackOptions o;
    o.rows = a->rows;
    for (int64_t k = a->k_step; k <= a->max_k; k += a->k_step) o.ks.push_back(k);
    if (o.ks.empty() || o.ks.back() != a->max_k) o.ks.push_back(a->max_k);
    o.seeds = a->seeds;
    o.first_seed = static_cast<uint64_t>(a->first_seed);
    for (MechanismKind kind : parse_mechanism_list(a->mechanisms)) {
      MechanismParams p;
      p.kind = kind;
      p.eta = a->eta;
      p.votes = a->votes;
      o.mechanisms.push_back(p);
    }
    const auto start = std::chrono::steady_clock::now();
    const std::vector<BoostingAttackPoint> points = run_boosting_attack(o);
    std::vector<AttackErrorAtRows> by_rows;
    for (int64_t n : a->bound_rows) {
      BoostingAttackOptions b = o;
      b.rows = n;
      b.ks = {a->max_k};
      b.seeds = a->bound_seeds;
      by_rows.push_back({n, run_boosting_attack(b)});
    }
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

    const size_t m_count = o.mechanisms.size(), k_count = o.ks.size();
    std::printf(
        "boosting attack: n = %lld rows, %lld seeds, eta = %g, votes = %lld "
        "(holdout = the majority vote's loss on the holdout, shown = the board's answer "
        "to it, fresh = its loss on fresh labels)\n\n%6s",
        static_cast<long long>(o.rows), static_cast<long long>(o.seeds), a->eta,
        static_cast<long long>(a->votes), "k");
    for (const MechanismParams& p : o.mechanisms) {
      std::printf("  %-27s",
                  (std::string(mechanism_name(p.kind)) + " holdout/shown/fresh").c_str());
    }
    std::printf("\n");
    for (size_t j = 0; j < k_count; ++j) {
      std::printf("%6lld", static_cast<long long>(o.ks[j]));
      for (size_t m = 0; m < m_count; ++m) {
        const BoostingAttackPoint& p = points[m * k_count + j];
        std::printf("  %.4f / %.4f / %.4f   ", p.holdout_loss, p.shown, p.fresh_loss);
      }
      std::printf("\n");
    }
    if (!by_rows.empty()) {
      std::printf(
          "\nleaderboard error max_t |R_t - 1/2| at k = %lld (%lld seeds per n); the "
          "Ladder's bound (ln(kn)/n)^(1/3):\n%8s",
          static_cast<long long>(a->max_k), static_cast<long long>(a->bound_seeds), "n");
      for (const MechanismParams& p : o.mechanisms) {
        std::printf("  %12s", std::string(mechanism_name(p.kind)).c_str());
      }
      std::printf("  %12s\n", "bound");
      for (const AttackErrorAtRows& r : by_rows) {
        std::printf("%8lld", static_cast<long long>(r.rows));
        for (const BoostingAttackPoint& p : r.points) std::printf("  %12.4f", p.leaderboard_error);
        std::printf("  %12.4f\n",
                    ladder_error_bound(static_cast<double>(a->max_k), static_cast<double>(r.rows)));
      }
    }
    std::printf("\n%.2f s on %d threads, %s\n", seconds, ThreadPool::current().size(),
                cpu_info().model_name.c_str());
    if (!a->svg.empty()) {
      write_file_atomic(a->svg, boosting_attack_svg(points, o.rows, by_rows, a->max_k));
      std::printf("-> %s\n", a->svg.c_str());
    }
    if (!a->json.empty()) {
      nlohmann::json j;
      j["settings"] = {{"rows", o.rows},
                       {"max_k", a->max_k},
                       {"k_step", a->k_step},
                       {"seeds", o.seeds},
                       {"first_seed", o.first_seed},
                       {"eta", a->eta},
                       {"votes", a->votes},
                       {"bound_seeds", a->bound_seeds}};
      j["points"] = nlohmann::json::array();
      for (const auto& p : points) j["points"].push_back(point_json(p));
      j["leaderboard_error_by_rows"] = nlohmann::json::array();
      for (const AttackErrorAtRows& r : by_rows) {
        for (const auto& p : r.points) {
          nlohmann::json pj = point_json(p);
          pj["rows"] = r.rows;
          pj["bound"] =
              ladder_error_bound(static_cast<double>(a->max_k), static_cast<double>(r.rows));
          j["leaderboard_error_by_rows"].push_back(pj);
        }
      }
      j["seconds"] = seconds;
      j["threads"] = ThreadPool::current().size();
      j["cpu"] = cpu_info().model_name;
      write_file_atomic(a->json, dump_one_point_per_line(j));
      std::printf("-> %s\n", a->json.c_str());
    }
  });
}

}  // namespace

void register_leaderboard(CLI::App& app) {
  auto* board = app.add_subcommand(
      "leaderboard",
      "A holdout leaderboard (kaggle, ladder, ladder-free or subsample answers) and the boosting "
      "attack against it");
  board->require_subcommand(1);
  register_init(*board);
  register_submit(*board);
  register_show(*board);
  register_attack(*board);
}

}  // namespace nanogpt::cli
