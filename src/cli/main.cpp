#include <CLI/CLI.hpp>
#include <cstdio>

#include "runtime/error.hpp"

int main(int argc, char** argv) {
  CLI::App app{"nanogpt: pre-train GPT language models with the NanoGPT-speedrun recipe"};
  app.require_subcommand(1);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  return 0;
}
