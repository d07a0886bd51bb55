// fp32 with AVX-512: MR rows × 32 columns, 2·MR zmm accumulators, 2 B loads and MR
// broadcasts per k.
#include <cstdint>

#include "kernels/gemm/epilogue.hpp"
#include "kernels/gemm/finish_registers.hpp"
#include "kernels/gemm/microkernel.hpp"
#include "kernels/gemm/pack.hpp"
#include "kernels/target.hpp"
#include "runtime/cpu_info.hpp"

NANOGPT_ALLOW_AVX512_INTRINSICS

namespace nanogpt {

namespace {

constexpr int64_t kMR = 8, kNR = 32;

// The sum over kc values of k into 16 registers, then either stored to acc or, kFinish, the
// tile finished into C as finish_tile_avx512 computes it (alpha·acc, then fma(beta, C, ·), then
// fma(addend_scale, addend, ·)).
template <bool kFinish>
NANOGPT_TARGET_AVX512 NANOGPT_ALWAYS_INLINE void tile(int64_t kc, const float* a, const float* b,
                                                      const float* acc_in, float* acc_out,
                                                      int64_t ld_acc, bool accumulate,
                                                      const TileFinish* finish) {
  __m512 t[kMR][2];
  start_tile_registers<kMR>(t, acc_in, ld_acc, accumulate);
  // A's micro-panel streams from L2 past the B panel held in L1: fetched 16 k steps (two
  // lines) ahead, with the loop unrolled by 4, the speedrun's products gained 1–4% on the Xeon
  // (family 6 model 207; bench/gemm_bench, alternating builds); unrolled without the prefetch
  // they lost as much. (Past the panel's end a prefetch touches nothing and cannot fault; its
  // address is formed as an integer, since a pointer past the end would be undefined.)
  constexpr uintptr_t kAhead = 16 * kMR * sizeof(float);
#pragma GCC unroll 4
  for (int64_t k = 0; k < kc; ++k) {
    _mm_prefetch(reinterpret_cast<const char*>(reinterpret_cast<uintptr_t>(a + k * kMR) + kAhead),
                 _MM_HINT_T0);
    const __m512 b0 = _mm512_loadu_ps(b + k * kNR);
    const __m512 b1 = _mm512_loadu_ps(b + k * kNR + 16);
#pragma GCC unroll 16
    for (int r = 0; r < kMR; ++r) {
      const __m512 ar = _mm512_set1_ps(a[k * kMR + r]);
      t[r][0] = _mm512_fmadd_ps(ar, b0, t[r][0]);
      t[r][1] = _mm512_fmadd_ps(ar, b1, t[r][1]);
    }
  }
  end_tile_registers<kFinish, kMR>(t, acc_out, ld_acc, finish);
}

NANOGPT_TARGET_AVX512 void kernel(int64_t kc, const void* a, const void* b, float* acc,
                                  int64_t ld_acc, bool accumulate) {
  tile<false>(kc, static_cast<const float*>(a), static_cast<const float*>(b), acc, acc, ld_acc,
              accumulate, nullptr);
}

// A is always packed here (the kernel has no fn_a_rows): lda_bytes is 0.
NANOGPT_TARGET_AVX512 void kernel_finishing(int64_t kc, const void* a, int64_t /*lda_bytes*/,
                                            const void* b, const float* acc, int64_t ld_acc,
                                            bool accumulate, const TileFinish& finish) {
  tile<true>(kc, static_cast<const float*>(a), static_cast<const float*>(b), acc, nullptr, ld_acc,
             accumulate, &finish);
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
  const bool vector_finish = cpu_info().avx512bw && cpu_info().avx512vl;
  m.finish = vector_finish ? finish_tile_avx512 : finish_tile_avx2;
  // Finishing from the registers repeats finish_tile_avx512's arithmetic, so only beside it.
  m.fn_finishing = vector_finish ? kernel_finishing : nullptr;
  m.stream = stream_tile_avx512;
  m.runnable = [] { return isa_available(IsaLevel::kAvx512); };
  return m;
}

}  // namespace nanogpt
