// bf16 products with AVX512-BF16: VDPBF16PS adds, per fp32 lane, the two products of a pair
// of bf16. 12 rows × 32 columns: 24 zmm accumulators, 2 B loads (32 columns × a k pair) and
// 12 broadcast pairs of A per k pair.
#include <cstring>

#include "kernels/gemm/epilogue.hpp"
#include "kernels/gemm/microkernel.hpp"
#include "kernels/gemm/pack.hpp"
#include "kernels/target.hpp"
#include "runtime/cpu_info.hpp"

NANOGPT_ALLOW_AVX512_INTRINSICS

namespace nanogpt {

namespace {

constexpr int64_t kMR = 12, kNR = 32;

NANOGPT_TARGET_AVX512BF16 void kernel(int64_t kc, const void* a_v, const void* b_v, float* acc,
                                      int64_t ld_acc, bool accumulate) {
  const bf16* a = static_cast<const bf16*>(a_v);
  const bf16* b = static_cast<const bf16*>(b_v);
  __m512 c[kMR][2];
#pragma GCC unroll 16
  for (int r = 0; r < kMR; ++r) {
    c[r][0] = accumulate ? _mm512_loadu_ps(acc + r * ld_acc) : _mm512_setzero_ps();
    c[r][1] = accumulate ? _mm512_loadu_ps(acc + r * ld_acc + 16) : _mm512_setzero_ps();
  }
  for (int64_t kk = 0; kk < kc / 2; ++kk) {
    const __m512bh b0 = (__m512bh)_mm512_loadu_si512(b + kk * 2 * kNR);
    const __m512bh b1 = (__m512bh)_mm512_loadu_si512(b + kk * 2 * kNR + kNR);
#pragma GCC unroll 16
    for (int r = 0; r < kMR; ++r) {
      int32_t pair;
      std::memcpy(&pair, a + kk * 2 * kMR + 2 * r, sizeof pair);
      const __m512bh ar = (__m512bh)_mm512_set1_epi32(pair);
      c[r][0] = _mm512_dpbf16_ps(c[r][0], ar, b0);
      c[r][1] = _mm512_dpbf16_ps(c[r][1], ar, b1);
    }
  }
#pragma GCC unroll 16
  for (int r = 0; r < kMR; ++r) {
    _mm512_storeu_ps(acc + r * ld_acc, c[r][0]);
    _mm512_storeu_ps(acc + r * ld_acc + 16, c[r][1]);
  }
}

layout::Layout a_layout(int64_t rows, int64_t k) {
  return layout::vnni_a(rows, k, kMR);
}
layout::Layout b_layout(int64_t k, int64_t cols) {
  return layout::vnni_b(k, cols, kNR);
}

static_assert(kMR == pack::kVnniMr && kNR == pack::kVnniNr, "pack_avx512.cpp packs these widths");

}  // namespace

MicroKernel microkernel_avx512_bf16() {
  MicroKernel m{"avx512_bf16", kMR, kNR, kernel};
  m.level = IsaLevel::kAvx512;
  m.k_step = 2;
  m.packed_bytes = 2;
  m.bf16_products = true;
  m.a_layout = a_layout;
  m.b_layout = b_layout;
  m.pack_a[1] = pack::vnni_pack_a_f32;
  m.pack_a[2] = pack::vnni_pack_a_bf16;
  m.pack_b[1] = pack::vnni_pack_b_f32;
  m.pack_b[2] = pack::vnni_pack_b_bf16;
  m.finish = finish_tile_avx512;
  m.stream = stream_tile_avx512;
  // Pairs of k make its dot products: a deeper kc for the same bytes of packed panel.
  m.blocking = {96, 256, 512};
  // The packers and epilogue use AVX-512BW and VL too.
  m.runnable = [] {
    const CpuInfo& cpu = cpu_info();
    return isa_available(IsaLevel::kAvx512) && cpu.avx512_bf16 && cpu.avx512bw && cpu.avx512vl;
  };
  return m;
}

}  // namespace nanogpt
