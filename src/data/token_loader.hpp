// Streams (input, target) batches from token shards with the semantics of modded-nanogpt's
// distributed_data_generator: a global batch of B tokens per step; rank r of W takes
// tokens[pos + r·B/W : pos + (r+1)·B/W + 1] (inputs and targets offset by one), pos advances
// by B, and the loader moves to the next shard when pos + B + 1 >= the shard's length.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "runtime/file_io.hpp"

namespace nanogpt {

struct LoaderOptions {
  std::string pattern;        // glob; matching shards are read in sorted order
  uint64_t batch_tokens = 0;  // B, across all ranks
  int rank = 0;
  int world_size = 1;
  // Start every sequence of `seq_len` tokens at an <|endoftext|> token (documents are never
  // entered mid-way). 0 disables. seq_len must divide B / world_size.
  bool align_to_eot = false;
  uint64_t seq_len = 0;
  uint32_t eot_id = 0;
  bool cycle = false;       // after the last shard, start again (epoch + 1)
  uint32_t vocab_size = 0;  // nonzero: every token must be below it
};

// Everything needed to resume exactly where a run left off.
struct LoaderPosition {
  uint64_t shard = 0;  // index into the sorted file list
  uint64_t pos = 0;    // start of the next global batch within that shard
  uint64_t epoch = 0;
  bool operator==(const LoaderPosition&) const = default;
};

class TokenLoader {
 public:
  explicit TokenLoader(LoaderOptions options);

  // Fills inputs and targets with this rank's B/W tokens. Throws InputError once every shard
  // is used up (unless cycling).
  void next(std::vector<int32_t>& inputs, std::vector<int32_t>& targets);

  LoaderPosition position() const { return position_; }
  void restore(const LoaderPosition& position);

  const std::vector<std::string>& files() const { return files_; }
  uint64_t local_batch_tokens() const { return options_.batch_tokens / options_.world_size; }

 private:
  void open_shard(uint64_t index);
  void advance_shard();
  bool batch_fits() const;
  void next_aligned(std::vector<int32_t>& inputs, std::vector<int32_t>& targets);

  LoaderOptions options_;
  std::vector<std::string> files_;
  MappedFile mapped_;
  std::span<const uint16_t> tokens_;
  std::vector<uint64_t> eot_positions_;  // only with align_to_eot
  uint64_t open_index_ = ~0ULL;
  LoaderPosition position_;
};

}  // namespace nanogpt
