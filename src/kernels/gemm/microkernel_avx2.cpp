// 6×16 with AVX2 + FMA: 12 ymm accumulators, 2 B loads and a broadcast per k — enough
// independent FMAs to cover their latency on two ports.
#include "kernels/gemm/epilogue.hpp"
#include "kernels/gemm/microkernel.hpp"
#include "kernels/gemm/pack.hpp"
#include "kernels/target.hpp"

namespace nanogpt {

namespace {

constexpr int64_t kMR = 6, kNR = 16;

NANOGPT_TARGET_AVX2 void kernel(int64_t kc, const void* a_v, const void* b_v, float* acc,
                                int64_t ld_acc, bool accumulate) {
  const float* a = static_cast<const float*>(a_v);
  const float* b = static_cast<const float*>(b_v);
  __m256 c[kMR][2];
#pragma GCC unroll 6
  for (int r = 0; r < kMR; ++r) {
    c[r][0] = accumulate ? _mm256_loadu_ps(acc + r * ld_acc) : _mm256_setzero_ps();
    c[r][1] = accumulate ? _mm256_loadu_ps(acc + r * ld_acc + 8) : _mm256_setzero_ps();
  }
  for (int64_t k = 0; k < kc; ++k) {
    const __m256 b0 = _mm256_loadu_ps(b + k * kNR);
    const __m256 b1 = _mm256_loadu_ps(b + k * kNR + 8);
#pragma GCC unroll 6
    for (int r = 0; r < kMR; ++r) {
      const __m256 ar = _mm256_broadcast_ss(a + k * kMR + r);
      c[r][0] = _mm256_fmadd_ps(ar, b0, c[r][0]);
      c[r][1] = _mm256_fmadd_ps(ar, b1, c[r][1]);
    }
  }
#pragma GCC unroll 6
  for (int r = 0; r < kMR; ++r) {
    _mm256_storeu_ps(acc + r * ld_acc, c[r][0]);
    _mm256_storeu_ps(acc + r * ld_acc + 8, c[r][1]);
  }
}

layout::Layout a_layout(int64_t rows, int64_t k) {
  return layout::fp32_a(rows, k, kMR);
}
layout::Layout b_layout(int64_t k, int64_t cols) {
  return layout::fp32_b(k, cols, kNR);
}

}  // namespace

MicroKernel microkernel_avx2() {
  MicroKernel m{"avx2", kMR, kNR, kernel};
  m.level = IsaLevel::kAvx2;
  m.a_layout = a_layout;
  m.b_layout = b_layout;
  m.pack_a = pack::fp32_pack_table<kMR>();
  m.pack_b = pack::fp32_pack_table<kNR>();
  m.finish = finish_tile_avx2;
  m.runnable = [] { return isa_available(IsaLevel::kAvx2); };
  return m;
}

}  // namespace nanogpt
