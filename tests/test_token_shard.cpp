#include <gtest/gtest.h>

#include <cstring>

#include "data/token_shard.hpp"
#include "runtime/error.hpp"
#include "support/fixtures.hpp"

namespace nanogpt {
namespace {

// Builds a shard byte by byte, independently of ShardWriter.
std::string shard_bytes(const std::vector<uint16_t>& tokens, int32_t magic = 20240520,
                        int32_t version = 1, int64_t count = -1) {
  std::string out(1024, '\0');
  auto put32 = [&](size_t at, int32_t v) {
    for (int k = 0; k < 4; ++k)
      out[at + k] = static_cast<char>((static_cast<uint32_t>(v) >> (8 * k)) & 0xFF);
  };
  put32(0, magic);
  put32(4, version);
  put32(8, static_cast<int32_t>(count < 0 ? static_cast<int64_t>(tokens.size()) : count));
  for (uint16_t t : tokens) {
    out += static_cast<char>(t & 0xFF);
    out += static_cast<char>(t >> 8);
  }
  return out;
}

std::string expect_input_error(const std::string& path) {
  try {
    MappedFile m(path);
    shard_tokens(m);
  } catch (const InputError& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected an InputError for " << path;
  return "";
}

TEST(TokenShard, ReadsHandBuiltShard) {
  TempDir dir;
  std::vector<uint16_t> tokens = {50256, 0, 1, 255, 256, 65535, 12345};
  write_file_atomic(dir.path() + "/s.bin", shard_bytes(tokens));
  MappedFile m(dir.path() + "/s.bin");
  auto got = shard_tokens(m);
  ASSERT_EQ(got.size(), tokens.size());
  for (size_t i = 0; i < tokens.size(); ++i) EXPECT_EQ(got[i], tokens[i]);
}

TEST(TokenShard, WriterSplitsAcrossShardsAndRoundTrips) {
  TempDir dir;
  ShardWriter w(dir.path(), "train", 10);
  std::vector<uint32_t> all;
  for (uint32_t i = 0; i < 27; ++i) all.push_back(i * 1000 + 7);
  w.append(std::span(all).subspan(0, 4));
  w.append(std::span(all).subspan(4));
  auto names = w.finish();
  ASSERT_EQ(names,
            (std::vector<std::string>{"train_000000.bin", "train_000001.bin", "train_000002.bin"}));
  std::vector<uint32_t> back;
  for (const auto& n : names) {
    std::string bytes = read_file(dir.path() + "/" + n);
    // The header is exactly what an independent builder produces.
    MappedFile m(dir.path() + "/" + n);
    auto toks = shard_tokens(m);
    std::vector<uint16_t> as16(toks.begin(), toks.end());
    EXPECT_EQ(bytes, shard_bytes(as16));
    back.insert(back.end(), toks.begin(), toks.end());
  }
  EXPECT_EQ(back, all);
}

TEST(TokenShard, RejectsBadFilesNamingThem) {
  TempDir dir;
  std::vector<uint16_t> t = {1, 2, 3};
  const std::string p = dir.path() + "/bad.bin";
  write_file_atomic(p, shard_bytes(t, 12345));
  EXPECT_NE(expect_input_error(p).find("magic"), std::string::npos);
  write_file_atomic(p, shard_bytes(t, 20240520, 2));
  EXPECT_NE(expect_input_error(p).find("version"), std::string::npos);
  write_file_atomic(p, shard_bytes(t, 20240520, 1, 4));
  EXPECT_NE(expect_input_error(p).find("truncated"), std::string::npos);
  write_file_atomic(p, shard_bytes(t).substr(0, 100));
  EXPECT_NE(expect_input_error(p).find("header"), std::string::npos);
  EXPECT_NE(expect_input_error(p).find(p), std::string::npos);
}

TEST(TokenShard, WriterRefusesIdsBeyondUint16) {
  TempDir dir;
  ShardWriter w(dir.path(), "train", 100);
  std::vector<uint32_t> t = {1, 70000};
  EXPECT_THROW(w.append(t), InputError);
}

}  // namespace
}  // namespace nanogpt
