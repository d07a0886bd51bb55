#include <CLI/CLI.hpp>
#include <cstdio>
#include <string>

#include "cli/commands.hpp"
#include "runtime/build_info.hpp"
#include "runtime/comm.hpp"
#include "runtime/error.hpp"

namespace {

std::string join_names(const CLI::App& app) {
  std::string out;
  for (const CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; })) {
    out += (out.empty() ? "" : ", ") + sub->get_name();
  }
  return out;
}

std::string join_options(const CLI::App& app) {
  std::string out;
  for (const CLI::Option* opt : app.get_options()) {
    std::string name = opt->get_name(false, true);
    if (name.empty()) continue;
    out += (out.empty() ? "" : ", ") + name;
  }
  return out;
}

// CLI11 reports a missing subcommand before an unknown one; find the unknown word first so
// the message names it.
const CLI::App* find_unknown_subcommand(const CLI::App& root, int argc, char** argv,
                                        std::string* word) {
  const CLI::App* cur = &root;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg.empty() || arg[0] == '-') continue;
    auto subs = cur->get_subcommands([](const CLI::App*) { return true; });
    if (subs.empty()) return nullptr;
    const CLI::App* next = nullptr;
    for (const CLI::App* s : subs) {
      if (s->get_name() == arg) next = s;
    }
    if (next == nullptr) {
      *word = arg;
      return cur;
    }
    cur = next;
  }
  return nullptr;
}

const CLI::App* deepest_parsed(const CLI::App& root) {
  const CLI::App* cur = &root;
  for (;;) {
    auto subs = cur->get_subcommands();
    if (subs.empty()) return cur;
    cur = subs.front();
  }
}

// Under an MPI launcher an error on one rank must end the whole job: the other ranks would
// otherwise wait for it in their next collective. Rank 0 prints as a single process does; the
// others say which rank they are.
int fail(const char* kind, const char* what, int code) {
  if (nanogpt::Comm::launched_by_mpi() && nanogpt::Comm::world().distributed()) {
    const nanogpt::Comm& world = nanogpt::Comm::world();
    std::fprintf(stderr, "nanogpt: %s (%s): %s\n", kind, world.where().c_str(), what);
    nanogpt::Comm::abort_job(code);
  }
  std::fprintf(stderr, "nanogpt: %s: %s\n", kind, what);
  return code;
}

int run(int argc, char** argv);

}  // namespace

int main(int argc, char** argv) {
  try {
    // MPI starts here when a launcher started this process (and never otherwise).
    if (nanogpt::Comm::launched_by_mpi()) nanogpt::Comm::world();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "nanogpt: error: could not join the MPI job: %s\n", e.what());
    nanogpt::Comm::abort_job(1);
  }
  const int code = run(argc, argv);
  if (code == 0) {
    nanogpt::Comm::shutdown();
  } else if (nanogpt::Comm::launched_by_mpi() && nanogpt::Comm::world().distributed()) {
    nanogpt::Comm::abort_job(code);  // e.g. a usage error, already printed
  }
  return code;
}

namespace {

int run(int argc, char** argv) {
  CLI::App app{
      "nanogpt: pre-train GPT language models with the NanoGPT-speedrun recipe.\n"
      "Run `nanogpt SUBCOMMAND --help` for the flags of each subcommand."};
  app.name("nanogpt");
  app.set_version_flag("--version",
                       std::string(NANOGPT_VERSION) + " (" + nanogpt::build_revision() + ")");
  app.require_subcommand(1);
  nanogpt::cli::register_tokenizer(app);
  nanogpt::cli::register_encode(app);
  nanogpt::cli::register_decode(app);
  nanogpt::cli::register_tokenize(app);
  nanogpt::cli::register_train(app);
  nanogpt::cli::register_eval(app);
  nanogpt::cli::register_sample(app);
  nanogpt::cli::register_bench(app);
  nanogpt::cli::register_info(app);
  nanogpt::cli::register_leaderboard(app);
  nanogpt::cli::register_prepare(app);
  nanogpt::cli::register_speedrun(app);
  nanogpt::cli::register_evals(app);
  nanogpt::cli::register_plot(app);
  nanogpt::cli::register_sft(app);
  nanogpt::cli::register_rl(app);
  nanogpt::cli::register_dpo(app);
  nanogpt::cli::register_chat(app);

  std::string unknown;
  if (const CLI::App* where = find_unknown_subcommand(app, argc, argv, &unknown)) {
    std::fprintf(stderr, "nanogpt: error: unknown subcommand '%s'%s%s; valid subcommands: %s\n",
                 unknown.c_str(), where == &app ? "" : " for ",
                 where == &app ? "" : where->get_name().c_str(), join_names(*where).c_str());
    return 2;
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int code = app.exit(e);
    if (code != 0) {
      const CLI::App* cur = deepest_parsed(app);
      std::string subs = join_names(*cur);
      if (!subs.empty() && cur->get_subcommands().empty()) {
        std::fprintf(stderr, "valid subcommands: %s\n", subs.c_str());
      }
      std::fprintf(stderr, "valid options for '%s': %s\n", cur->get_name().c_str(),
                   join_options(*cur).c_str());
    }
    return code;
  } catch (const nanogpt::Error& e) {
    return fail("error", e.what(), 1);
  } catch (const std::exception& e) {
    return fail("internal error", e.what(), 2);
  }
  return 0;
}

}  // namespace
