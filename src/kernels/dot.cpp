#include "kernels/dot.hpp"

#include "kernels/target.hpp"

namespace nanogpt {

// Exact products (float × float fits a double), lane sums in a fixed order: every clone gives
// the same bits, whatever its vector width.
NANOGPT_TARGET_CLONES double dot_double(const float* a, const float* b, int64_t n) {
  return dot_double_lanes(a, b, n);
}

}  // namespace nanogpt
