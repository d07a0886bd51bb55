// What `sft`, `dpo` and `rl` check and resolve the same way before they run: a new run needs
// --checkpoint and an --out without checkpoints (--resume continues one), and the tokenizer is
// the one the checkpoint records unless --tokenizer names another.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace nanogpt::cli {

struct PosttrainTokenizer {
  std::string spec;
  nlohmann::json record;  // what the checkpoint's meta.json records of it (null if nothing)
};

PosttrainTokenizer resolve_posttrain_args(const std::string& stage, const std::string& checkpoint,
                                          const std::string& out, bool resume,
                                          const std::string& tokenizer);

}  // namespace nanogpt::cli
