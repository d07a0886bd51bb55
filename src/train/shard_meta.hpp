// What a set of token shards says about itself: the meta.json `nanogpt tokenize` writes next
// to them (src/data/shard_builder.cpp) names the tokenizer, its vocabulary size and its
// <|endoftext|> id. A training run takes vocab_size and eot_id from it unless they were set.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "config/config.hpp"

namespace nanogpt {

struct ShardMeta {
  std::string path;  // of meta.json
  int64_t vocab_size = 0;
  int64_t eot_id = 0;
  // The tokenizer's record, its file's path made absolute so it is found from anywhere.
  nlohmann::json tokenizer;
};

// The meta.json beside the first shard matching `train_pattern`, or nothing when there is no
// such shard or file (shards written by other tools). An InputError naming the file when it is
// there but unreadable.
std::optional<ShardMeta> read_shard_meta(const std::string& train_pattern);

// vocab_size and eot_id from the shards where `origins` shows the user did not set them; a
// value that was set and differs from the shards' is an InputError naming both values and
// where each came from.
void apply_shard_meta(Config& config, const ConfigOrigins& origins, const ShardMeta& shards);

}  // namespace nanogpt
