// Stores around the caches (kernels/streamed_store.hpp) against plain ones: copy_streamed gives
// the source's bits at every alignment of the output within a cache line, at lengths that end
// before the first aligned line, at a line's edge and inside the tail, and leaves the memory
// around the output untouched. (round_to_bf16_streamed: test_bf16.cpp, with the rounding's
// special classes.)
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/streamed_store.hpp"

namespace nanogpt {
namespace {

TEST(StreamedStore, CopyMatchesTheSourceBitForBitAtEveryAlignment) {
  std::mt19937 rng(7);
  std::vector<uint32_t> bits(4099);
  for (uint32_t& b : bits) b = static_cast<uint32_t>(rng());
  bits[5] = 0x7FC00001u;  // a NaN's payload is copied, not quieted
  std::vector<float> x(bits.size());
  std::memcpy(x.data(), bits.data(), bits.size() * sizeof(float));
  constexpr uint32_t kUntouched = 0xDEADBEEFu;
  std::vector<uint32_t> out(x.size() + 48);
  for (int64_t offset = 0; offset < 16; ++offset) {
    for (const int64_t n : {int64_t{0}, int64_t{1}, int64_t{9}, int64_t{16}, int64_t{33},
                            int64_t{256}, static_cast<int64_t>(x.size())}) {
      std::fill(out.begin(), out.end(), kUntouched);
      // Start from the buffer's 64-byte boundary, whatever the allocator gave.
      const auto base = reinterpret_cast<uintptr_t>(out.data());
      const int64_t start = static_cast<int64_t>((64 - base % 64) % 64 / sizeof(float)) + offset;
      copy_streamed(x.data(), n, reinterpret_cast<float*>(out.data() + start));
      streamed_stores_fence();
      for (int64_t i = 0; i < static_cast<int64_t>(out.size()); ++i) {
        const bool inside = i >= start && i < start + n;
        const uint32_t want = inside ? bits[static_cast<size_t>(i - start)] : kUntouched;
        ASSERT_EQ(out[static_cast<size_t>(i)], want)
            << "at " << i << ", offset " << offset << ", n " << n;
      }
    }
  }
}

}  // namespace
}  // namespace nanogpt
