// Text -> token shards: the data preparation of the speedrun (each document preceded by the
// <|endoftext|> token) with a deterministic train/validation split, encoded on all cores.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "data/bpe_tokenizer.hpp"
#include "data/document_reader.hpp"

namespace nanogpt {

struct ShardBuildOptions {
  CorpusOptions corpus;
  std::string output_dir;
  std::optional<uint64_t> val_docs;     // exactly this many validation documents
  std::optional<double> val_fraction;   // or this fraction of the documents (rounded)
  uint64_t shard_tokens = 100'000'000;  // as llm.c's FineWeb shards
  bool show_progress = true;            // only drawn when stderr is a terminal
};

struct ShardBuildResult {
  CorpusStats corpus;
  uint64_t train_documents = 0, val_documents = 0;
  uint64_t train_tokens = 0, val_tokens = 0;
  std::vector<std::string> train_shards, val_shards;
  double seconds = 0;
};

// Validation documents are spread evenly over the corpus: document k (0-based, among the D
// non-empty ones) is held out iff floor((k+1)·N/D) > floor(k·N/D), which picks exactly N.
bool is_validation_document(uint64_t k, uint64_t val_count, uint64_t total);

// Writes DIR/train_NNNNNN.bin, DIR/val_NNNNNN.bin and, last, DIR/meta.json (so a directory
// with meta.json is complete). Shards left from an earlier run that this one did not rewrite
// are removed.
ShardBuildResult build_token_shards(const BpeTokenizer& tokenizer,
                                    const ShardBuildOptions& options);

}  // namespace nanogpt
