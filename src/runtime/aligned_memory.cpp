#include "runtime/aligned_memory.hpp"

#include <cstdlib>
#include <new>

#if defined(__linux__)
#include <sys/mman.h>
#endif

namespace nanogpt {

void* allocate_aligned(std::size_t bytes) {
  const bool huge = bytes >= kHugePage;
  void* p = nullptr;
  if (posix_memalign(&p, huge ? kHugePage : kCacheLine, bytes > 0 ? bytes : 1) != 0) {
    throw std::bad_alloc();
  }
#if defined(MADV_HUGEPAGE)
  // Only the huge pages wholly inside the buffer: the advice never reaches a neighbour's
  // memory. It is advice; where the kernel declines it (THP "never", no free huge pages) the
  // buffer keeps small pages and works the same.
  if (huge) (void)madvise(p, bytes / kHugePage * kHugePage, MADV_HUGEPAGE);
#endif
  return p;
}

void free_aligned(void* p) {
  std::free(p);
}

}  // namespace nanogpt
