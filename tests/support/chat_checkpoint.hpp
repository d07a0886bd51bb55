// A micro model with a chat tokenizer, saved as a "pre-trained" checkpoint, for the
// post-training tests (sft, rl, rollouts; one process and MPI ranks) and the benchmarks that run
// it, with data for them.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "data/bpe_tokenizer.hpp"
#include "data/chat_format.hpp"
#include "fixtures.hpp"
#include "model.hpp"
#include "model/gpt.hpp"
#include "model/model_io.hpp"
#include "posttrain/preference_pairs.hpp"
#include "runtime/checkpoint.hpp"
#include "runtime/file_io.hpp"

namespace nanogpt {

inline const std::vector<std::string> kChatSpecials = {
    "<|endoftext|>", "<|user_start|>", "<|user_end|>", "<|assistant_start|>", "<|assistant_end|>"};

// 256 bytes, 39 merges and the five specials: 300 tokens, micro_config's vocabulary.
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
// micro model (weights only, as an imported checkpoint would be) that records the tokenizer.
struct MicroChatCheckpoint {
  TempDir dir;
  std::string tokenizer, checkpoint;
  nlohmann::json tokenizer_record;
  // `precision`: the model's arithmetic (the preset's auto is bf16 where the CPU has it).
  explicit MicroChatCheckpoint(bool with_chat_tokens = true,
                               PrecisionSetting precision = micro_config().precision) {
    const BpeTokenizer tok = chat_micro_tokenizer(with_chat_tokens);
    tokenizer = dir.path() + "/tokenizer.json";
    write_file_atomic(tokenizer, tok.to_json());
    Config c = micro_config();
    c.precision = precision;
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

// Conversations of a tiny skill: the reply is the user's word reversed.
inline std::string write_conversations(const std::string& path, int n) {
  std::vector<Conversation> convs;
  const char* words[] = {"cat", "dog", "sun", "tea", "map", "pen", "cup", "hat"};
  for (int i = 0; i < n; ++i) {
    std::string w = words[i % 8];
    std::string r(w.rbegin(), w.rend());
    convs.push_back(Conversation{{{ChatRole::kUser, "reverse " + w}, {ChatRole::kAssistant, r}}});
  }
  write_conversations_jsonl(path, convs);
  return path;
}

// Preference pairs of the same skill: the reversed word chosen, the word itself rejected.
inline std::string write_pairs(const std::string& path, int n) {
  std::vector<PreferencePair> pairs;
  const char* words[] = {"cat", "dog", "sun", "tea", "map", "pen", "cup", "hat"};
  for (int i = 0; i < n; ++i) {
    const std::string w = words[i % 8];
    pairs.push_back(
        {Conversation{{{ChatRole::kUser, "reverse " + w}}}, std::string(w.rbegin(), w.rend()), w});
  }
  write_preference_pairs(path, pairs);
  return path;
}

inline std::string model_bytes(const std::string& checkpoint) {
  return read_file(checkpoint + "/model.safetensors");
}

}  // namespace nanogpt
