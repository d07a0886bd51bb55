#include "kernels/rmsnorm.hpp"

#include "kernels/target.hpp"

namespace nanogpt {

// Element loops without reassociation or contraction (this file is built with
// -ffp-contract=off, CMakeLists.txt), so every clone gives the baseline's bits.
NANOGPT_TARGET_CLONES void rmsnorm_forward(const float* x, int64_t ld_x, float* y, int64_t ld_y,
                                           float* rstd, int64_t rows, int64_t dim) {
  rmsnorm_forward_rows(x, ld_x, y, ld_y, rstd, rows, dim);
}

NANOGPT_TARGET_CLONES void rmsnorm_backward(const float* y, int64_t ld_y, const float* rstd,
                                            const float* dy, int64_t ld_dy, float* dx,
                                            int64_t ld_dx, int64_t rows, int64_t dim,
                                            bool accumulate) {
  rmsnorm_backward_rows(y, ld_y, rstd, dy, ld_dy, dx, ld_dx, rows, dim, accumulate);
}

}  // namespace nanogpt
