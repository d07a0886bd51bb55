#include "data/token_shard.hpp"

#include <cstring>

#include "runtime/error.hpp"

namespace nanogpt {

std::span<const uint16_t> shard_tokens(const MappedFile& file) {
  return shard_tokens(file.bytes(), file.path());
}

std::span<const uint16_t> shard_tokens(std::span<const uint8_t> file, const std::string& path) {
  if (file.size() < kShardHeaderBytes) {
    throw InputError("token shard '" + path + "' is " + std::to_string(file.size()) +
                     " bytes, shorter than the 1024-byte header; the file is truncated or not "
                     "a shard");
  }
  int32_t header[kShardHeaderInts];
  std::memcpy(header, file.data(), kShardHeaderBytes);
  if (header[0] != kShardMagic) {
    throw InputError("token shard '" + path + "' has magic " + std::to_string(header[0]) +
                     ", expected " + std::to_string(kShardMagic) +
                     "; it is not a modded-nanogpt/llm.c .bin shard (write one with `nanogpt "
                     "tokenize`)");
  }
  if (header[1] != kShardVersion) {
    throw InputError("token shard '" + path + "' has version " + std::to_string(header[1]) +
                     "; only version 1 (uint16 tokens) is supported");
  }
  if (header[2] < 0) {
    throw InputError("token shard '" + path + "' has a negative token count in its header");
  }
  uint64_t count = static_cast<uint32_t>(header[2]);
  uint64_t expected = kShardHeaderBytes + 2 * count;
  if (file.size() != expected) {
    throw InputError("token shard '" + path + "' is " + std::to_string(file.size()) +
                     " bytes but its header promises " + std::to_string(count) + " tokens (" +
                     std::to_string(expected) + " bytes); the file is truncated or corrupt");
  }
  // A mapping is page-aligned and the header is 1024 bytes, so the tokens are aligned.
  return {reinterpret_cast<const uint16_t*>(file.data() + kShardHeaderBytes), count};
}

std::string shard_file_name(const std::string& prefix, size_t index) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "_%06zu.bin", index);
  return prefix + buf;
}

ShardWriter::ShardWriter(std::string dir, std::string prefix, uint64_t tokens_per_shard)
    : dir_(std::move(dir)), prefix_(std::move(prefix)), per_shard_(tokens_per_shard) {
  if (per_shard_ == 0 || per_shard_ > 0x7FFFFFFF) {
    throw InputError("tokens per shard must be between 1 and 2^31-1 (the header holds an int32)");
  }
}

ShardWriter::~ShardWriter() = default;  // an unfinished shard's temporary is removed

void ShardWriter::open_next() {
  std::string name = shard_file_name(prefix_, written_.size());
  current_ = std::make_unique<AtomicFileWriter>(dir_ + "/" + name);
  written_.push_back(name);
  int32_t header[kShardHeaderInts] = {};
  current_->write(header, sizeof header);  // patched with the real count on close
  in_current_ = 0;
}

void ShardWriter::close_current() {
  int32_t header[kShardHeaderInts] = {};
  header[0] = kShardMagic;
  header[1] = kShardVersion;
  header[2] = static_cast<int32_t>(in_current_);
  current_->write_at(0, header, sizeof header);
  current_->commit();
  current_.reset();
}

void ShardWriter::append(std::span<const uint32_t> tokens) {
  size_t i = 0;
  while (i < tokens.size()) {
    if (!current_) open_next();
    size_t take =
        static_cast<size_t>(std::min<uint64_t>(tokens.size() - i, per_shard_ - in_current_));
    buffer_.resize(take);
    for (size_t k = 0; k < take; ++k) {
      uint32_t t = tokens[i + k];
      if (t >= kShardMaxVocab) {
        throw InputError("token id " + std::to_string(t) +
                         " does not fit a uint16 shard; the vocabulary must be at most 65536");
      }
      buffer_[k] = static_cast<uint16_t>(t);
    }
    current_->write(buffer_.data(), take * sizeof(uint16_t));
    in_current_ += take;
    total_ += take;
    i += take;
    if (in_current_ == per_shard_) close_current();
  }
}

std::vector<std::string> ShardWriter::finish() {
  if (current_) close_current();
  return written_;
}

}  // namespace nanogpt
