// A tokenizer for micro_config's vocabulary (support/model.hpp): 256 bytes, 43 merges and
// <|endoftext|> — 300 tokens, EOT 299 — for tests that score text with a micro model.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "data/bpe_tokenizer.hpp"

namespace nanogpt {

inline BpeTokenizer micro_tokenizer() {
  std::vector<std::pair<uint32_t, uint32_t>> merges;
  const std::string common = "etaoinshrdlucmfwypvbgk";
  for (char ch : common) merges.emplace_back(static_cast<uint32_t>(' '), static_cast<uint32_t>(ch));
  for (size_t i = 0; merges.size() < 43; ++i) {
    merges.emplace_back(static_cast<uint32_t>(common[i]), static_cast<uint32_t>(' '));
  }
  return BpeTokenizer::from_merges(merges, {"<|endoftext|>"});
}

}  // namespace nanogpt
