#include <CLI/CLI.hpp>
#include <cstdio>

#include "cli/commands.hpp"
#include "runtime/error.hpp"

int main(int argc, char** argv) {
  CLI::App app{
      "nanogpt: pre-train GPT language models with the NanoGPT-speedrun recipe.\n"
      "Run `nanogpt SUBCOMMAND --help` for the flags of each subcommand."};
  app.set_version_flag("--version", std::string(NANOGPT_VERSION) + " (" NANOGPT_GIT_REVISION ")");
  app.require_subcommand(1);
  nanogpt::cli::register_tokenizer(app);
  nanogpt::cli::register_encode(app);
  nanogpt::cli::register_decode(app);
  nanogpt::cli::register_tokenize(app);
  nanogpt::cli::register_bench(app);
  nanogpt::cli::register_info(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const nanogpt::Error& e) {
    std::fprintf(stderr, "nanogpt: error: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "nanogpt: internal error: %s\n", e.what());
    return 2;
  }
  return 0;
}
