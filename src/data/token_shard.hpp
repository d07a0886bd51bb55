// The token-shard format shared with modded-nanogpt and llm.c: a header of 256 little-endian
// int32 (magic 20240520, version 1, token count, rest zero), then the tokens as uint16.
#pragma once

#include <bit>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "runtime/file_io.hpp"

namespace nanogpt {

static_assert(std::endian::native == std::endian::little,
              "token shards are little-endian; this build reads them in place");

inline constexpr int32_t kShardMagic = 20240520;
inline constexpr int32_t kShardVersion = 1;
inline constexpr size_t kShardHeaderInts = 256;
inline constexpr size_t kShardHeaderBytes = kShardHeaderInts * sizeof(int32_t);
inline constexpr uint64_t kShardMaxVocab = 65536;  // uint16 tokens

// Checks magic, version and that the file size matches the header's token count; returns the
// tokens in place. Throws InputError naming the file otherwise.
std::span<const uint16_t> shard_tokens(const MappedFile& file);
// The same over bytes already in memory; `bytes` must be 2-byte aligned.
std::span<const uint16_t> shard_tokens(std::span<const uint8_t> bytes, const std::string& path);

// Writes a sequence of shards DIR/PREFIX_000000.bin, PREFIX_000001.bin, ... each holding
// `tokens_per_shard` tokens (the last one fewer), each written atomically.
class ShardWriter {
 public:
  ShardWriter(std::string dir, std::string prefix, uint64_t tokens_per_shard);
  ~ShardWriter();
  void append(std::span<const uint32_t> tokens);
  // Completes the last shard; returns the names of every shard written.
  std::vector<std::string> finish();
  uint64_t total_tokens() const { return total_; }

 private:
  void open_next();
  void close_current();
  std::string dir_, prefix_;
  uint64_t per_shard_;
  uint64_t in_current_ = 0;
  uint64_t total_ = 0;
  std::unique_ptr<AtomicFileWriter> current_;
  std::vector<uint16_t> buffer_;
  std::vector<std::string> written_;
};

std::string shard_file_name(const std::string& prefix, size_t index);

}  // namespace nanogpt
