#include "kernels/gemm/microkernel.hpp"

namespace nanogpt {

namespace {

constexpr int64_t kMR = 4, kNR = 8;

void kernel(int64_t kc, const float* a, const float* b, float* out, int64_t ldc, float alpha,
            float beta) {
  float c[kMR][kNR] = {};
  for (int64_t k = 0; k < kc; ++k) {
    for (int64_t r = 0; r < kMR; ++r) {
      for (int64_t j = 0; j < kNR; ++j) c[r][j] += a[k * kMR + r] * b[k * kNR + j];
    }
  }
  for (int64_t r = 0; r < kMR; ++r) {
    for (int64_t j = 0; j < kNR; ++j) {
      float* o = out + r * ldc + j;
      *o = beta == 0.0f ? alpha * c[r][j] : alpha * c[r][j] + beta * *o;
    }
  }
}

}  // namespace

MicroKernel microkernel_scalar() {
  return {"scalar", kMR, kNR, kernel};
}

}  // namespace nanogpt
