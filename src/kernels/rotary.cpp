#include "kernels/rotary.hpp"

#include "kernels/target.hpp"

namespace nanogpt {

// Built with -ffp-contract=off (CMakeLists.txt): no clone fuses a·c + b·s, so all give the
// baseline's bits.
NANOGPT_TARGET_CLONES void rotate_heads(float* x, int64_t heads, int64_t head_dim, const float* c,
                                        const float* s, float direction) {
  rotate_heads_rows(x, heads, head_dim, c, s, direction);
}

}  // namespace nanogpt
