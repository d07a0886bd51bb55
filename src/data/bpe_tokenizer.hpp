// Byte-level BPE tokenizer with tiktoken's semantics: a vocabulary of unique byte strings whose
// id is also its merge rank; within each pre-tokenizer piece, the adjacent pair whose
// concatenation has the lowest id is merged first (leftmost on ties) until none is a token.
// Both OpenAI's GPT-2 files and our own trained tokenizers load into this one class.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "data/token_lookup.hpp"

namespace nanogpt {

inline constexpr std::string_view kEndOfText = "<|endoftext|>";

// Conversation markers (data/chat_format.hpp), nanochat's set without its tool-use tokens; the
// document's <|endoftext|> doubles as the conversation's begin token. Our trainer reserves them
// right after <|endoftext|>, and the GPT-2 tokenizer appends them (50257..50260), in this order.
inline constexpr std::string_view kUserStart = "<|user_start|>";
inline constexpr std::string_view kUserEnd = "<|user_end|>";
inline constexpr std::string_view kAssistantStart = "<|assistant_start|>";
inline constexpr std::string_view kAssistantEnd = "<|assistant_end|>";
inline constexpr std::array<std::string_view, 4> kChatSpecialTokens = {
    kUserStart, kUserEnd, kAssistantStart, kAssistantEnd};

struct SpecialToken {
  std::string text;
  uint32_t id;
};

class BpeTokenizer {
 public:
  // "gpt2:DIR" loads OpenAI's encoder.json + vocab.bpe from DIR; anything else is a path to a
  // tokenizer written by `nanogpt tokenizer train`.
  static BpeTokenizer load(const std::string& spec);
  static BpeTokenizer from_gpt2_files(const std::string& dir);
  static BpeTokenizer from_json_file(const std::string& path);
  // 256 byte tokens, then one token per merge (ids 256, 257, ...), then the specials.
  static BpeTokenizer from_merges(const std::vector<std::pair<uint32_t, uint32_t>>& merges,
                                  const std::vector<std::string>& specials);

  // Throws InputError naming the byte offset if `text` is not valid UTF-8. With
  // allow_special, occurrences of special-token text become their ids; otherwise they are
  // encoded as ordinary text.
  std::vector<uint32_t> encode(std::string_view text, bool allow_special) const;
  void encode_append(std::string_view text, bool allow_special, std::vector<uint32_t>& out) const;
  // Decodes to raw bytes (a token may end mid-character; the concatenation is what matters).
  std::string decode(std::span<const uint32_t> ids) const;

  uint32_t vocab_size() const { return static_cast<uint32_t>(tokens_.size()); }
  uint32_t ordinary_count() const { return ordinary_count_; }
  std::string_view token_bytes(uint32_t id) const { return tokens_.at(id); }
  const std::vector<SpecialToken>& special_tokens() const { return specials_; }
  // Id of <|endoftext|>; throws if this tokenizer has none.
  uint32_t eot_id() const;
  // Id of the special token spelled `text`, if this tokenizer has it.
  std::optional<uint32_t> find_special(std::string_view text) const;
  // The merges that define tokens 256.. (only for tokenizers built from merges).
  const std::vector<std::pair<uint32_t, uint32_t>>& merges() const { return merges_; }

  // What was loaded (the spec) and a SHA-256 over the files that define it.
  const std::string& spec() const { return spec_; }
  const std::string& sha256() const { return sha256_; }

  // Serialises a merges-based tokenizer as JSON (the format of from_json_file).
  std::string to_json() const;

  // Exposed for tests: encode one pre-tokenizer piece, choosing the algorithm by length.
  void encode_piece(std::string_view piece, std::vector<uint32_t>& out) const;
  void merge_piece_quadratic(std::string_view piece, std::vector<uint32_t>& out) const;
  void merge_piece_heap(std::string_view piece, std::vector<uint32_t>& out) const;

 private:
  void finish_building();
  void encode_ordinary(std::string_view text, std::vector<uint32_t>& out) const;

  std::vector<std::string> tokens_;  // bytes of every id, specials included
  uint32_t ordinary_count_ = 0;      // ids below this are BPE tokens
  std::vector<SpecialToken> specials_;
  std::vector<std::pair<uint32_t, uint32_t>> merges_;
  uint32_t byte_ids_[256] = {};
  TokenIdTable ids_;
  PairTable pairs_;
  std::string spec_;
  std::string sha256_;
};

}  // namespace nanogpt
