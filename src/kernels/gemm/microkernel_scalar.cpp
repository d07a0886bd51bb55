// The portable kernel, always correct on any x86-64: 4×8 in plain C++.
#include "kernels/gemm/epilogue.hpp"
#include "kernels/gemm/microkernel.hpp"
#include "kernels/gemm/pack.hpp"

namespace nanogpt {

namespace {

constexpr int64_t kMR = 4, kNR = 8;

void kernel(int64_t kc, const void* a_v, const void* b_v, float* acc, int64_t ld_acc,
            bool accumulate) {
  const float* a = static_cast<const float*>(a_v);
  const float* b = static_cast<const float*>(b_v);
  float c[kMR][kNR] = {};
  if (accumulate) {
    for (int64_t r = 0; r < kMR; ++r) {
      for (int64_t j = 0; j < kNR; ++j) c[r][j] = acc[r * ld_acc + j];
    }
  }
  for (int64_t k = 0; k < kc; ++k) {
    for (int64_t r = 0; r < kMR; ++r) {
      for (int64_t j = 0; j < kNR; ++j) c[r][j] += a[k * kMR + r] * b[k * kNR + j];
    }
  }
  for (int64_t r = 0; r < kMR; ++r) {
    for (int64_t j = 0; j < kNR; ++j) acc[r * ld_acc + j] = c[r][j];
  }
}

layout::Layout a_layout(int64_t rows, int64_t k) {
  return layout::fp32_a(rows, k, kMR);
}
layout::Layout b_layout(int64_t k, int64_t cols) {
  return layout::fp32_b(k, cols, kNR);
}

}  // namespace

MicroKernel microkernel_scalar() {
  MicroKernel m{"scalar", kMR, kNR, kernel};
  m.level = IsaLevel::kScalar;
  m.a_layout = a_layout;
  m.b_layout = b_layout;
  m.pack_a = pack::fp32_pack_table<kMR>();
  m.pack_b = pack::fp32_pack_table<kNR>();
  m.finish = finish_tile_scalar;
  return m;
}

}  // namespace nanogpt
