// fp32 with AVX-512: MR rows × 32 columns, 2·MR zmm accumulators, 2 B loads and MR
// broadcasts per k.
#include "kernels/gemm/epilogue.hpp"
#include "kernels/gemm/microkernel.hpp"
#include "kernels/gemm/pack.hpp"
#include "kernels/target.hpp"
#include "runtime/cpu_info.hpp"

NANOGPT_ALLOW_AVX512_INTRINSICS

namespace nanogpt {

namespace {

constexpr int64_t kMR = 8, kNR = 32;

NANOGPT_TARGET_AVX512 void kernel(int64_t kc, const void* a_v, const void* b_v, float* acc,
                                  int64_t ld_acc, bool accumulate) {
  const float* a = static_cast<const float*>(a_v);
  const float* b = static_cast<const float*>(b_v);
  __m512 c[kMR][2];
#pragma GCC unroll 16
  for (int r = 0; r < kMR; ++r) {
    c[r][0] = accumulate ? _mm512_loadu_ps(acc + r * ld_acc) : _mm512_setzero_ps();
    c[r][1] = accumulate ? _mm512_loadu_ps(acc + r * ld_acc + 16) : _mm512_setzero_ps();
  }
  // A's micro-panel streams from L2 past the B panel held in L1: fetched 16 k steps (two
  // lines) ahead, with the loop unrolled by 4, the speedrun's products gained 1–4% on the Xeon
  // (family 6 model 207; bench/gemm_bench, alternating builds); unrolled without the prefetch
  // they lost as much. (A prefetch past the panel's end touches nothing that faults.)
#pragma GCC unroll 4
  for (int64_t k = 0; k < kc; ++k) {
    _mm_prefetch(reinterpret_cast<const char*>(a + (k + 16) * kMR), _MM_HINT_T0);
    const __m512 b0 = _mm512_loadu_ps(b + k * kNR);
    const __m512 b1 = _mm512_loadu_ps(b + k * kNR + 16);
#pragma GCC unroll 16
    for (int r = 0; r < kMR; ++r) {
      const __m512 ar = _mm512_set1_ps(a[k * kMR + r]);
      c[r][0] = _mm512_fmadd_ps(ar, b0, c[r][0]);
      c[r][1] = _mm512_fmadd_ps(ar, b1, c[r][1]);
    }
  }
#pragma GCC unroll 16
  for (int r = 0; r < kMR; ++r) {
    _mm512_storeu_ps(acc + r * ld_acc, c[r][0]);
    _mm512_storeu_ps(acc + r * ld_acc + 16, c[r][1]);
  }
}

layout::Layout a_layout(int64_t rows, int64_t k) {
  return layout::fp32_a(rows, k, kMR);
}
layout::Layout b_layout(int64_t k, int64_t cols) {
  return layout::fp32_b(k, cols, kNR);
}

}  // namespace

MicroKernel microkernel_avx512() {
  MicroKernel m{"avx512", kMR, kNR, kernel};
  m.level = IsaLevel::kAvx512;
  m.a_layout = a_layout;
  m.b_layout = b_layout;
  // The vector packers need AVX-512BW and VL (bf16 loads, masked 256-bit moves); without
  // them the table holds the portable ones.
  m.pack_a = pack::fp32_pack_table_avx512<kMR>();
  m.pack_b = pack::fp32_pack_table_avx512<kNR>();
  // The vector epilogue's bf16 stores need AVX-512BW.
  m.finish = cpu_info().avx512bw && cpu_info().avx512vl ? finish_tile_avx512 : finish_tile_avx2;
  m.stream = stream_tile_avx512;
  m.runnable = [] { return isa_available(IsaLevel::kAvx512); };
  return m;
}

}  // namespace nanogpt
