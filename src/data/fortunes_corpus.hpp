// The project's default corpus, Debian's `fortunes` package (one fortune per document), as the
// main job and the speedrun track prepare it: a 8192-token BPE trained on every fortune file
// and token shards with 5% of the documents held out for validation, under one directory:
//   DIR/tokenizer.json, DIR/shards/{train,val}_NNNNNN.bin, DIR/shards/meta.json
// Each part is made only if missing, so preparing again is instant.
#pragma once

#include <string>
#include <vector>

namespace nanogpt {

inline constexpr const char* kFortunesDirectory = "/usr/share/games/fortunes";

// Every fortune file, sorted bytewise (the *.dat indexes and the links skipped). An InputError
// with the package to install if there are none.
std::vector<std::string> fortune_files();

struct PreparedCorpus {
  std::string tokenizer;      // DIR/tokenizer.json
  std::string train_pattern;  // DIR/shards/train_*.bin
  std::string val_pattern;    // DIR/shards/val_*.bin
};

// Makes whatever of DIR's tokenizer and shards is missing; says on stderr what it did or
// skipped. A tokenizer it trains has the chat tokens unless `chat_tokens` is false
// (BpeTrainOptions); one that exists is kept either way, with a warning if it differs.
PreparedCorpus prepare_fortunes(const std::string& dir, bool chat_tokens = true);

}  // namespace nanogpt
