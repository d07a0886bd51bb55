// libFuzzer target: arbitrary bytes as a token shard must be accepted or refused with an
// InputError, never crash or read out of bounds.
#include <cstdint>
#include <cstring>
#include <vector>

#include "data/token_shard.hpp"
#include "runtime/error.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // Copy into 2-byte-aligned storage, as a memory map would be.
  std::vector<uint16_t> storage((size + 1) / 2);
  if (size > 0) std::memcpy(storage.data(), data, size);
  std::span<const uint8_t> bytes(reinterpret_cast<const uint8_t*>(storage.data()), size);
  try {
    auto tokens = nanogpt::shard_tokens(bytes, "fuzz.bin");
    uint64_t sum = 0;
    for (uint16_t t : tokens) sum += t;  // touch every token the header promised
    if (tokens.size() * 2 + nanogpt::kShardHeaderBytes != size) __builtin_trap();
    (void)sum;
  } catch (const nanogpt::InputError&) {
  }
  return 0;
}
