#include "kernels/bf16.hpp"

#include "kernels/target.hpp"

namespace nanogpt {

// The scalar rounding is integer arithmetic without branches: each clone vectorizes it.
NANOGPT_TARGET_CLONES void round_to_bf16(const float* x, int64_t n, bf16* out) {
  for (int64_t i = 0; i < n; ++i) out[i].bits = to_bf16_bits(x[i]);
}

}  // namespace nanogpt
