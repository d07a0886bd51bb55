// Trains a byte-level BPE vocabulary: 256 byte tokens, learned merges, then <|endoftext|> and
// (unless turned off) the four chat tokens.
#pragma once

#include <cstdint>

#include "data/bpe_tokenizer.hpp"
#include "data/document_reader.hpp"

namespace nanogpt {

struct BpeTrainOptions {
  uint32_t vocab_size = 8192;  // everything: the 256 bytes, the merges and the special tokens
  // Reserve kChatSpecialTokens after <|endoftext|> (4 fewer merges), so one tokenizer serves
  // pre-training and conversations (post-training). Off: <|endoftext|> alone, as before.
  bool chat_tokens = true;
};

struct BpeTrainReport {
  CorpusStats corpus;
  uint64_t pieces = 0;         // pre-tokenizer pieces in the corpus
  uint64_t unique_pieces = 0;  // distinct pieces (BPE runs on these, weighted by count)
  uint32_t merges = 0;
  bool ran_out_of_pairs = false;  // the corpus had too few distinct pairs for vocab_size
};

// Deterministic: the same corpus and options give the same merges, in the same order.
// Ties between equally frequent pairs go to the smaller (left id, right id).
BpeTokenizer train_bpe(const CorpusOptions& corpus, const BpeTrainOptions& options,
                       BpeTrainReport* report);

}  // namespace nanogpt
