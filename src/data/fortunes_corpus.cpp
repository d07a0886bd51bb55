#include "data/fortunes_corpus.hpp"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "data/bpe_trainer.hpp"
#include "data/shard_builder.hpp"
#include "runtime/error.hpp"
#include "runtime/file_io.hpp"

namespace nanogpt {

std::vector<std::string> fortune_files() {
  std::vector<std::string> files;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(kFortunesDirectory, ec)) {
    // Links (the *.u8 names) repeat a file's text; *.dat are indexes.
    if (e.is_symlink() || !e.is_regular_file() || e.path().extension() == ".dat") continue;
    files.push_back(e.path().string());
  }
  std::sort(files.begin(), files.end());
  if (files.empty()) {
    throw InputError(std::string("no fortune files in ") + kFortunesDirectory +
                     "; install Debian's fortunes package (apt-get install fortunes), or run "
                     "scripts/setup.sh");
  }
  return files;
}

PreparedCorpus prepare_fortunes(const std::string& dir, bool chat_tokens) {
  const std::filesystem::path root(dir);
  PreparedCorpus out;
  out.tokenizer = (root / "tokenizer.json").string();
  out.train_pattern = (root / "shards" / "train_*.bin").string();
  out.val_pattern = (root / "shards" / "val_*.bin").string();
  CorpusOptions corpus;
  bool listed = false;
  auto list = [&] {
    if (listed) return;
    corpus.files = fortune_files();
    corpus.doc_separator.emplace(1, '%');  // (= "%" trips a false -Wrestrict in GCC 12)
    listed = true;
  };
  std::filesystem::create_directories(dir);
  if (file_exists(out.tokenizer)) {
    std::fprintf(stderr, "tokenizer: %s exists, skipping\n", out.tokenizer.c_str());
    // Retraining would orphan the shards made with it, so a directory keeps its tokenizer. Only
    // its special tokens are looked at: a file that is no tokenizer is for its users to report.
    const nlohmann::json file = nlohmann::json::parse(read_file(out.tokenizer), nullptr, false);
    const bool readable =
        file.is_object() && file.contains("special_tokens") && file["special_tokens"].is_object();
    const bool has_chat = readable && file["special_tokens"].contains(std::string(kUserStart));
    if (readable && has_chat && !chat_tokens) {
      std::fprintf(stderr,
                   "warning: %s has the chat tokens although --no-chat-tokens was given; it is "
                   "kept with its shards (delete %s to prepare it without them)\n",
                   out.tokenizer.c_str(), dir.c_str());
    } else if (readable && !has_chat && chat_tokens) {
      std::fprintf(stderr,
                   "warning: %s has no chat tokens (trained before them, or with "
                   "--no-chat-tokens); it is kept with its shards (delete %s to prepare it with "
                   "them, or pass --no-chat-tokens)\n",
                   out.tokenizer.c_str(), dir.c_str());
    }
  } else {
    list();
    BpeTrainOptions options;
    options.vocab_size = 8192;
    options.chat_tokens = chat_tokens;
    BpeTrainReport report;
    const BpeTokenizer tokenizer = train_bpe(corpus, options, &report);
    write_file_atomic(out.tokenizer, tokenizer.to_json());
    std::fprintf(stderr, "tokenizer: trained %u tokens on %llu fortunes -> %s\n",
                 tokenizer.vocab_size(), static_cast<unsigned long long>(report.corpus.documents),
                 out.tokenizer.c_str());
  }
  const std::string shards = (root / "shards").string();
  if (file_exists(shards + "/meta.json")) {
    std::fprintf(stderr, "shards: %s/meta.json exists, skipping\n", shards.c_str());
  } else {
    list();
    ShardBuildOptions o;
    o.corpus = corpus;
    o.output_dir = shards;
    o.val_fraction = 0.05;
    const ShardBuildResult r = build_token_shards(BpeTokenizer::load(out.tokenizer), o);
    std::fprintf(stderr, "shards: %llu train and %llu validation tokens -> %s\n",
                 static_cast<unsigned long long>(r.train_tokens),
                 static_cast<unsigned long long>(r.val_tokens), shards.c_str());
  }
  return out;
}

}  // namespace nanogpt
