// The built-in fortunes suites (issue 17, item 4), from the held-out documents: the validation
// shards that `nanogpt prepare fortunes` wrote (data/shard_builder's hold-out rule), read back
// and decoded with the corpus tokenizer, one fortune per <|endoftext|>-started document — so the
// hold-out rule lives in one place and no training fortune can enter a suite.
//
// - fortunes-bpb: `text` cases (bits_per_byte, loss, perplexity), the first `cases` held-out
//   fortunes of at least min_bytes bytes, in shard order.
// - fortunes-choice: HellaSwag-style `choice` cases: a fortune cut at the space nearest its
//   middle (context: the part before it; the real ending: the rest, with its leading space),
//   and three endings of other held-out fortunes whose endings are nearest in byte length
//   (drawn among the 12 nearest), shuffled; acc, acc_norm and acc_bytes. Fortunes are drawn in
//   an order shuffled by the seed.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "data/bpe_tokenizer.hpp"
#include "eval/suite.hpp"

namespace nanogpt {

// The decoded documents of the token shards matching `pattern` (a glob), empty ones dropped.
std::vector<std::string> shard_documents(const std::string& pattern, const BpeTokenizer& tokenizer);

struct FortunesSuiteOptions {
  int64_t cases = 200;
  uint64_t seed = 0;
  int64_t min_bytes = 40;   // shorter fortunes are skipped (too little to split or score)
  int64_t max_bytes = 600;  // choice: longer ones are skipped (the endings get long)
  std::string tokenizer;    // recorded in the suite (its "tokenizer" field)
};

Suite make_fortunes_bpb_suite(const std::vector<std::string>& documents,
                              const FortunesSuiteOptions& options);
Suite make_fortunes_choice_suite(const std::vector<std::string>& documents,
                                 const FortunesSuiteOptions& options);

}  // namespace nanogpt
