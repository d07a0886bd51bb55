// allocate_aligned: cache-line starts for small buffers; huge-page starts, and the advice to
// back them with huge pages, for large ones.
#include "runtime/aligned_memory.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>

namespace nanogpt {
namespace {

struct FreeAligned {
  void operator()(void* p) const { free_aligned(p); }
};
using Owned = std::unique_ptr<void, FreeAligned>;

uintptr_t address(const void* p) {
  return reinterpret_cast<uintptr_t>(p);
}

// The VmFlags line of the mapping in /proc/self/smaps that holds `p`, or "" if none does.
std::string vm_flags_of(const void* p) {
  std::ifstream smaps("/proc/self/smaps");
  std::string line;
  bool inside = false;
  while (std::getline(smaps, line)) {
    uintptr_t begin = 0, end = 0;
    char dash = 0;
    std::istringstream range(line);
    if (range >> std::hex >> begin >> dash >> end && dash == '-') {
      inside = begin <= address(p) && address(p) < end;
    } else if (inside && line.rfind("VmFlags:", 0) == 0) {
      return line;
    }
  }
  return "";
}

TEST(AlignedMemory, SmallBuffersStartOnACacheLineAndHoldTheirBytes) {
  for (size_t bytes : {size_t{0}, size_t{1}, size_t{100}, size_t{4096}, kHugePage - 64}) {
    Owned p(allocate_aligned(bytes));
    ASSERT_NE(p.get(), nullptr) << bytes;
    EXPECT_EQ(address(p.get()) % kCacheLine, 0u) << bytes;
    std::memset(p.get(), 0x5a, bytes);
    if (bytes > 0) {
      EXPECT_EQ(static_cast<unsigned char*>(p.get())[bytes - 1], 0x5a) << bytes;
    }
  }
}

TEST(AlignedMemory, LargeBuffersStartOnAHugePage) {
  for (size_t bytes : {kHugePage, kHugePage + 100, 5 * kHugePage}) {
    Owned p(allocate_aligned(bytes));
    EXPECT_EQ(address(p.get()) % kHugePage, 0u) << bytes;
    std::memset(p.get(), 0x3c, bytes);
    EXPECT_EQ(static_cast<unsigned char*>(p.get())[bytes - 1], 0x3c) << bytes;
  }
}

// The advice shows as the "hg" flag of the buffer's mapping whether or not the kernel then
// finds huge pages for it. A kernel without transparent huge pages has neither the flag nor
// the sysfs directory.
TEST(AlignedMemory, LargeBuffersAreAdvisedIntoHugePages) {
  if (!std::ifstream("/sys/kernel/mm/transparent_hugepage/enabled")) {
    GTEST_SKIP() << "this kernel has no transparent huge pages";
  }
  Owned p(allocate_aligned(3 * kHugePage));
  const auto* bytes = static_cast<const std::byte*>(p.get());
  for (size_t page = 0; page < 3; ++page) {
    const std::string flags = vm_flags_of(bytes + page * kHugePage);
    ASSERT_FALSE(flags.empty()) << "no mapping holds huge page " << page;
    EXPECT_NE(flags.find(" hg"), std::string::npos) << "huge page " << page << ": " << flags;
  }
}

TEST(AlignedMemory, AlignedVectorAndAlignedBufferUseIt) {
  AlignedVector<float> v(kHugePage / sizeof(float) + 1);
  EXPECT_EQ(address(v.data()) % kHugePage, 0u);
  AlignedBuffer b;
  b.reserve(kHugePage * 2, /*zero_new=*/true);
  EXPECT_EQ(address(b.data()) % kHugePage, 0u);
  EXPECT_EQ(b.floats()[kHugePage / 2 - 1], 0.0f);
  b.reserve(100);  // kept: no smaller buffer replaces it
  EXPECT_EQ(b.capacity(), kHugePage * 2);
}

}  // namespace
}  // namespace nanogpt
