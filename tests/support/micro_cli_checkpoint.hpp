// A micro checkpoint made through the binary as a user makes one: `corpus` (documents
// separated by "%" lines) written to DIR/f.txt, a 300-token tokenizer trained on it without the
// chat tokens (so <|endoftext|> is micro_config's 299) at DIR/data/tokenizer.json, its shards
// (20 held-out documents) in DIR/data/shards, and 2 fp32 steps of micro_config into DIR/run.
// DIR/data is what `evals make-suite --builtin ... --data` reads. Call it under
// ASSERT_NO_FATAL_FAILURE.
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "config/config.hpp"
#include "fixtures.hpp"
#include "model.hpp"
#include "runtime/file_io.hpp"

namespace nanogpt {

// 80 short fortune-like documents: enough held-out ones (20) for a few choice cases.
inline std::string micro_fortunes_corpus() {
  std::string corpus;
  for (int i = 0; i < 80; ++i) {
    corpus += "fortune number " + std::to_string(i) + " says hello to the " +
              (i % 3 == 0 ? "cat" : "dog") + " and then goes home.\n%\n";
  }
  return corpus;
}

inline void make_micro_cli_checkpoint(const std::string& dir, const std::string& corpus) {
  write_file_atomic(dir + "/f.txt", corpus);
  std::filesystem::create_directories(dir + "/data");
  auto tokenizer = run_nanogpt("tokenizer train --input " + dir +
                               "/f.txt --doc-separator % --vocab-size 300 --no-chat-tokens "
                               "--output " +
                               dir + "/data/tokenizer.json");
  ASSERT_EQ(tokenizer.exit_code, 0) << tokenizer.err;
  auto tokenized =
      run_nanogpt("tokenize --tokenizer " + dir + "/data/tokenizer.json --input " + dir +
                  "/f.txt --doc-separator % --val-docs 20 --output-dir " + dir + "/data/shards");
  ASSERT_EQ(tokenized.exit_code, 0) << tokenized.err;
  Config c = micro_config();
  c.num_iterations = 2;
  c.val_loss_every = 0;
  c.precision = PrecisionSetting::kFp32;
  write_file_atomic(dir + "/micro.json", config_to_json(c).dump());
  auto train = run_nanogpt("train --config " + dir + "/micro.json --train '" + dir +
                           "/data/shards/train_*.bin' --val '" + dir +
                           "/data/shards/val_*.bin' --out " + dir + "/run");
  ASSERT_EQ(train.exit_code, 0) << train.err;
}

}  // namespace nanogpt
