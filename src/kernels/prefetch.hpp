// Asking for memory before it is read, where the hardware prefetcher cannot guess the address:
// a row picked by a token (the value embeddings' rows in the attention's q/k/v passes).
#pragma once

#include <cstddef>

#include "runtime/aligned_memory.hpp"

namespace nanogpt {

// Every cache line of [p, p + bytes) into L1 (a hint: no fault on any address).
inline void prefetch_lines(const void* p, size_t bytes) {
  const char* c = static_cast<const char*>(p);
  for (size_t at = 0; at < bytes; at += kCacheLine) __builtin_prefetch(c + at, 0, 3);
}

}  // namespace nanogpt
