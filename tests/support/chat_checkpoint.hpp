// A micro model to post-train and chat with: a tokenizer with the chat tokens for
// micro_config's vocabulary, and a "pre-trained" checkpoint of a randomly initialised micro
// model that records it (posttrain and chat tests).
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "data/bpe_tokenizer.hpp"
#include "fixtures.hpp"
#include "model.hpp"
#include "model/gpt.hpp"
#include "model/model_io.hpp"
#include "runtime/checkpoint.hpp"
#include "runtime/file_io.hpp"

namespace nanogpt {

inline const std::vector<std::string> kChatSpecials = {
    "<|endoftext|>", "<|user_start|>", "<|user_end|>", "<|assistant_start|>", "<|assistant_end|>"};

// 256 bytes, 39 merges and the five specials: 300 tokens, micro_config's vocabulary. Without
// the chat tokens: 43 merges and <|endoftext|>, the same size.
inline BpeTokenizer chat_micro_tokenizer(bool with_chat_tokens = true) {
  std::vector<std::pair<uint32_t, uint32_t>> merges;
  const std::string common = "etaoinshrdlucmfwypvbgk";
  for (char ch : common) merges.emplace_back(static_cast<uint32_t>(' '), static_cast<uint32_t>(ch));
  const size_t count = with_chat_tokens ? 39 : 43;
  for (size_t i = 0; merges.size() < count; ++i) {
    merges.emplace_back(static_cast<uint32_t>(common[i]), static_cast<uint32_t>(' '));
  }
  return BpeTokenizer::from_merges(
      merges, with_chat_tokens ? kChatSpecials : std::vector<std::string>{"<|endoftext|>"});
}

// A directory with tokenizer.json and a "pre-trained" checkpoint of a randomly initialised
// micro model (weights only, as an imported checkpoint would be).
struct ChatMicroCheckpoint {
  TempDir dir;
  std::string tokenizer, checkpoint;
  nlohmann::json tokenizer_record;
  explicit ChatMicroCheckpoint(bool with_chat_tokens = true) {
    const BpeTokenizer tok = chat_micro_tokenizer(with_chat_tokens);
    tokenizer = dir.path() + "/tokenizer.json";
    write_file_atomic(tokenizer, tok.to_json());
    Config c = micro_config();
    c.eot_id = static_cast<int64_t>(tok.eot_id());
    Gpt model(c);
    model.init_parameters(5);
    CheckpointContents cc;
    cc.model = model_tensors(model);
    cc.model_metadata["format"] = "pt";
    cc.model_metadata["config"] = config_to_json(c).dump();
    tokenizer_record = {{"spec", tokenizer}};
    cc.meta = {{"step", 0}, {"tokenizer", tokenizer_record}};
    checkpoint = save_checkpoint(dir.path() + "/pretrain", 0, cc);
  }
};

}  // namespace nanogpt
