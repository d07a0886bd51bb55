#include "train/shard_meta.hpp"

#include <filesystem>

#include "runtime/error.hpp"
#include "runtime/file_io.hpp"

namespace nanogpt {

namespace fs = std::filesystem;

std::optional<ShardMeta> read_shard_meta(const std::string& train_pattern) {
  const std::vector<std::string> files = glob_sorted(train_pattern);
  if (files.empty()) return std::nullopt;
  const fs::path path = fs::path(files.front()).parent_path() / "meta.json";
  if (!fs::exists(path)) return std::nullopt;
  ShardMeta meta;
  meta.path = path.string();
  try {
    const auto j = nlohmann::json::parse(read_file(meta.path));
    const auto& t = j.at("tokenizer");
    meta.vocab_size = t.at("vocab_size").get<int64_t>();
    meta.eot_id = t.at("eot_id").get<int64_t>();
    meta.tokenizer = t;
  } catch (const nlohmann::json::exception& e) {
    throw InputError("'" + meta.path +
                     "' is not the meta.json of nanogpt tokenize (it needs \"tokenizer\" with "
                     "\"vocab_size\" and \"eot_id\"): " +
                     e.what() + "; re-run nanogpt tokenize, or remove the file");
  }
  // A tokenizer path relative to where `tokenize` ran; sampling later runs from elsewhere.
  const std::string spec = meta.tokenizer.value("spec", "");
  if (spec.rfind("gpt2:", 0) == 0) {
    meta.tokenizer["spec"] = "gpt2:" + fs::absolute(spec.substr(5)).string();
  } else if (!spec.empty()) {
    meta.tokenizer["spec"] = fs::absolute(spec).string();
  }
  return meta;
}

void apply_shard_meta(Config& config, const ConfigOrigins& origins, const ShardMeta& shards) {
  for (auto [key, field, value] : {std::tuple{"vocab_size", &config.vocab_size, shards.vocab_size},
                                   {"eot_id", &config.eot_id, shards.eot_id}}) {
    const auto given = origins.find(key);
    if (given == origins.end()) {
      *field = value;
    } else if (*field != value) {
      throw InputError(std::string(key) + " " + std::to_string(*field) + " (from " + given->second +
                       ") conflicts with the training shards' " + key + " " +
                       std::to_string(value) + " (from '" + shards.path + "'); leave " + key +
                       " unset to take the shards' value");
    }
  }
}

}  // namespace nanogpt
