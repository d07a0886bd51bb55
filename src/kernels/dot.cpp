#include "kernels/dot.hpp"

namespace nanogpt {

// Exact products (float × float fits a double), lane sums in a fixed order: every clone gives
// the same bits, whatever its vector width.
__attribute__((target_clones("avx512f", "arch=haswell", "default"))) double dot_double(
    const float* a, const float* b, int64_t n) {
  return dot_double_lanes(a, b, n);
}

}  // namespace nanogpt
