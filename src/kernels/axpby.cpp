#include "kernels/axpby.hpp"

#include "kernels/target.hpp"

namespace nanogpt {

// Built with -ffp-contract=off (CMakeLists.txt), so that no clone fuses a·x + b·y.
NANOGPT_TARGET_CLONES void add_scaled(int64_t n, const float* x, float a, const float* y,
                                      float* out) {
  add_scaled_loop(n, x, a, y, out);
}

NANOGPT_TARGET_CLONES void weighted_sum(int64_t n, float a, const float* x, float b, const float* y,
                                        float* out) {
  weighted_sum_loop(n, a, x, b, y, out);
}

NANOGPT_TARGET_CLONES void scaled_copy(int64_t n, float a, const float* x, float* out) {
  scaled_copy_loop(n, a, x, out);
}

}  // namespace nanogpt
