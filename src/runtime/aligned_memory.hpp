// Memory that starts on a 64-byte cache line. The kernels read rows of activations and weights
// with 64-byte vector loads and pack them 16 or 32 values at a time; malloc's 16-byte alignment
// makes every such row straddle one more cache line than it needs (measured: a weight-gradient
// GEMM packing from a 16-byte-aligned 16 MB activation ran at 228 GFLOP/s, from a 64-byte-aligned
// copy at 278).
//
// Buffers of a huge page or more also start on one and are advised into huge pages
// (transparent huge pages in the kernel's "madvise" mode, Debian's default): the step streams
// through gigabytes of activations, and with 4 KiB pages every 4 KiB of a strided read is
// another TLB entry and every first touch another page fault.
#pragma once

#include <cstddef>
#include <cstring>
#include <memory>
#include <vector>

namespace nanogpt {

inline constexpr std::size_t kCacheLine = 64;
inline constexpr std::size_t kHugePage = std::size_t{2} << 20;

// `bytes` (0 allowed) starting on a cache line, or, from kHugePage bytes up, on a huge page with
// its whole huge pages advised as such; std::bad_alloc when there is no memory. Freed by
// free_aligned.
void* allocate_aligned(std::size_t bytes);
void free_aligned(void* p);

template <class T>
struct CacheAlignedAllocator {
  using value_type = T;
  CacheAlignedAllocator() = default;
  template <class U>
  CacheAlignedAllocator(const CacheAlignedAllocator<U>&) {}  // NOLINT: rebinding is implicit
  T* allocate(std::size_t n) { return static_cast<T*>(allocate_aligned(n * sizeof(T))); }
  void deallocate(T* p, std::size_t) { free_aligned(p); }
  template <class U>
  bool operator==(const CacheAlignedAllocator<U>&) const {
    return true;
  }
};

// For tensors the kernels stream through: activations, parameters, gradients, optimizer state.
template <class T>
using AlignedVector = std::vector<T, CacheAlignedAllocator<T>>;

// A growable scratch buffer kept between calls (packed GEMM panels, attention tiles). reserve()
// keeps nothing when it grows.
class AlignedBuffer {
 public:
  void* reserve(std::size_t bytes, bool zero_new = false) {
    if (bytes > capacity_) {
      ptr_.reset(static_cast<std::byte*>(allocate_aligned(bytes)));
      if (zero_new) std::memset(ptr_.get(), 0, bytes);
      capacity_ = bytes;
    }
    return ptr_.get();
  }
  std::byte* data() const { return ptr_.get(); }
  float* floats() const { return reinterpret_cast<float*>(ptr_.get()); }
  std::size_t capacity() const { return capacity_; }

 private:
  struct Free {
    void operator()(std::byte* p) const { free_aligned(p); }
  };
  std::unique_ptr<std::byte, Free> ptr_;
  std::size_t capacity_ = 0;
};

}  // namespace nanogpt
