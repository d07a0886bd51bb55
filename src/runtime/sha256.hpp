// SHA-256 (FIPS 180-4), used to fingerprint tokenizers and data so metadata can say exactly
// which files produced a run.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

namespace nanogpt {

class Sha256 {
 public:
  Sha256();
  void update(std::string_view data);
  std::array<uint8_t, 32> digest();  // Finishes the hash; the object is then spent.
  std::string hex_digest();

 private:
  void compress(const uint8_t* block);
  std::array<uint32_t, 8> state_;
  std::array<uint8_t, 64> buffer_{};
  uint64_t length_ = 0;  // bytes
  size_t buffered_ = 0;
};

std::string sha256_hex(std::string_view data);

}  // namespace nanogpt
