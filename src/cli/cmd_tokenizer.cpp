// `nanogpt tokenizer train`: learn a byte-level BPE vocabulary from text.
#include <chrono>
#include <cstdio>

#include "cli/commands.hpp"
#include "data/bpe_trainer.hpp"
#include "runtime/file_io.hpp"

namespace nanogpt::cli {

void register_tokenizer(CLI::App& app) {
  auto* tok = app.add_subcommand("tokenizer", "Train byte-level BPE tokenizers");
  tok->require_subcommand(1);
  auto* train = tok->add_subcommand(
      "train",
      "Train a byte-level BPE (GPT-2 pre-tokenization, 256 bytes + merges + <|endoftext|> + the "
      "chat tokens <|user_start|> <|user_end|> <|assistant_start|> <|assistant_end|>)");
  struct Args {
    std::vector<std::string> inputs;
    uint32_t vocab_size = 8192;
    std::string output;
    std::string doc_separator;
    std::string format = "auto";
    bool no_chat_tokens = false;
  };
  auto args = std::make_shared<Args>();
  train->add_option("--input", args->inputs, "Text or JSON Lines files")
      ->required()
      ->check(CLI::ExistingFile);
  train
      ->add_option("--vocab-size", args->vocab_size,
                   "Total vocabulary size, including the 256 bytes and the special tokens")
      ->capture_default_str()
      ->check(CLI::Range(257u, 1u << 20));
  train->add_option("--output", args->output, "Where to write the tokenizer JSON")->required();
  train->add_option("--doc-separator", args->doc_separator,
                    "A line that separates documents in text files (e.g. % for fortunes); default: "
                    "one document per file");
  train
      ->add_option("--input-format", args->format,
                   "auto (by extension: .jsonl is JSON Lines), text or jsonl")
      ->capture_default_str();
  train->add_flag(
      "--no-chat-tokens", args->no_chat_tokens,
      "Leave out the four chat tokens (4 more merges; <|endoftext|> is the only special "
      "token, as in tokenizers from before post-training)");
  train->callback([args] {
    CorpusOptions corpus;
    corpus.files = args->inputs;
    corpus.format = parse_input_format(args->format);
    if (!args->doc_separator.empty()) corpus.doc_separator = args->doc_separator;
    BpeTrainOptions options;
    options.vocab_size = args->vocab_size;
    options.chat_tokens = !args->no_chat_tokens;
    BpeTrainReport report;
    auto start = std::chrono::steady_clock::now();
    BpeTokenizer tokenizer = train_bpe(corpus, options, &report);
    double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    write_file_atomic(args->output, tokenizer.to_json());
    std::printf(
        "trained %u-token BPE on %llu documents (%llu empty skipped, %.2f MB, %llu pieces, %llu "
        "distinct) in %.2f s -> %s\n",
        tokenizer.vocab_size(), static_cast<unsigned long long>(report.corpus.documents),
        static_cast<unsigned long long>(report.corpus.empty_documents), report.corpus.bytes / 1e6,
        static_cast<unsigned long long>(report.pieces),
        static_cast<unsigned long long>(report.unique_pieces), seconds, args->output.c_str());
    if (report.ran_out_of_pairs) {
      std::fprintf(stderr,
                   "warning: the corpus ran out of pairs to merge; the vocabulary has %u tokens, "
                   "not the %u asked for\n",
                   tokenizer.vocab_size(), args->vocab_size);
    }
  });
}

}  // namespace nanogpt::cli
