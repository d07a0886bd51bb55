// `nanogpt prepare fortunes`: the default corpus's tokenizer and shards (data/fortunes_corpus.hpp),
// as the main job and the speedrun track use them.
#include <cstdio>

#include "cli/commands.hpp"
#include "data/fortunes_corpus.hpp"

namespace nanogpt::cli {

void register_prepare(CLI::App& app) {
  auto* prep = app.add_subcommand("prepare", "Prepare a built-in corpus (tokenizer and shards)");
  prep->require_subcommand(1);
  auto* fortunes = prep->add_subcommand(
      "fortunes",
      "Debian's fortunes, one fortune per document: an 8192-token BPE (with the chat tokens) and "
      "shards with 5% held out for validation (parts that exist are kept)");
  auto out = std::make_shared<std::string>("data/fortunes");
  fortunes->add_option("--out", *out, "Directory for tokenizer.json and shards/")
      ->capture_default_str();
  auto no_chat_tokens = std::make_shared<bool>(false);
  fortunes->add_flag("--no-chat-tokens", *no_chat_tokens,
                     "Train the tokenizer without the four chat tokens (nanogpt tokenizer train "
                     "--help); an existing tokenizer is kept either way");
  fortunes->callback([out, no_chat_tokens] {
    const PreparedCorpus c = prepare_fortunes(*out, !*no_chat_tokens);
    std::printf("tokenizer: %s\ntrain: %s\nval: %s\n", c.tokenizer.c_str(), c.train_pattern.c_str(),
                c.val_pattern.c_str());
  });
}

}  // namespace nanogpt::cli
