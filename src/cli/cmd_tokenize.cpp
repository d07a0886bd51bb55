// `nanogpt tokenize`: text -> modded-nanogpt/llm.c token shards.
#include <cstdio>

#include "cli/commands.hpp"
#include "cli/number_range.hpp"
#include "data/shard_builder.hpp"

namespace nanogpt::cli {

void register_tokenize(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "tokenize", "Encode text into .bin token shards (train_*.bin, val_*.bin, meta.json)");
  struct Args {
    std::string tokenizer;
    std::vector<std::string> inputs;
    std::string output_dir;
    std::string doc_separator;
    std::string format = "auto";
    int64_t val_docs = 0;  // int64_t: CLI11 would wrap a negative value into a uint64_t
    double val_fraction = 0.01;
    uint64_t shard_tokens = 100'000'000;
  };
  auto a = std::make_shared<Args>();
  cmd->add_option("--tokenizer", a->tokenizer,
                  "Tokenizer JSON file, or gpt2:DIR for OpenAI's GPT-2 files")
      ->required();
  cmd->add_option("--input", a->inputs, "Text or JSON Lines files")
      ->required()
      ->check(CLI::ExistingFile);
  cmd->add_option("--output-dir", a->output_dir, "Directory for the shards and meta.json")
      ->required();
  cmd->add_option(
      "--doc-separator", a->doc_separator,
      "A line that separates documents in text files (e.g. %); default: one document per file");
  cmd->add_option("--input-format", a->format,
                  "auto (by extension: .jsonl is JSON Lines), text or jsonl")
      ->capture_default_str();
  auto* vd = cmd->add_option("--val-docs", a->val_docs,
                             "Hold out exactly N documents, spread evenly, for validation")
                 ->check(CLI::Range(int64_t{0}, int64_t{1} << 40));
  auto* vf = cmd->add_option("--val-fraction", a->val_fraction,
                             "Hold out this fraction of documents for validation")
                 ->capture_default_str()
                 ->check(finite_in_range(0.0, 0.999));
  vd->excludes(vf);
  cmd->add_option("--shard-tokens", a->shard_tokens,
                  "Tokens per shard (the last shard holds the rest)")
      ->capture_default_str()
      ->check(CLI::Range(uint64_t{1}, uint64_t{0x7FFFFFFF}));
  cmd->callback([a, vd] {
    BpeTokenizer tokenizer = BpeTokenizer::load(a->tokenizer);
    ShardBuildOptions o;
    o.corpus.files = a->inputs;
    o.corpus.format = parse_input_format(a->format);
    if (!a->doc_separator.empty()) o.corpus.doc_separator = a->doc_separator;
    o.output_dir = a->output_dir;
    if (vd->count() > 0) {
      o.val_docs = static_cast<uint64_t>(a->val_docs);
    } else {
      o.val_fraction = a->val_fraction;
    }
    o.shard_tokens = a->shard_tokens;
    ShardBuildResult r = build_token_shards(tokenizer, o);
    std::printf(
        "tokenized %llu documents (%llu empty skipped, %.2f MB) in %.2f s (%.1f MB/s)\n"
        "  train: %llu documents, %llu tokens in %zu shard(s)\n"
        "  val:   %llu documents, %llu tokens in %zu shard(s)\n"
        "  -> %s/meta.json\n",
        static_cast<unsigned long long>(r.corpus.documents),
        static_cast<unsigned long long>(r.corpus.empty_documents), r.corpus.bytes / 1e6, r.seconds,
        r.seconds > 0 ? r.corpus.bytes / 1e6 / r.seconds : 0.0,
        static_cast<unsigned long long>(r.train_documents),
        static_cast<unsigned long long>(r.train_tokens), r.train_shards.size(),
        static_cast<unsigned long long>(r.val_documents),
        static_cast<unsigned long long>(r.val_tokens), r.val_shards.size(), a->output_dir.c_str());
  });
}

}  // namespace nanogpt::cli
