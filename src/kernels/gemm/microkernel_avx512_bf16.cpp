// bf16 products with AVX512-BF16: VDPBF16PS adds, per fp32 lane, the two products of a pair
// of bf16. 8 rows × 32 columns: 16 zmm accumulators, 2 B loads (32 columns × a k pair) and
// 8 broadcast pairs of A per k pair. A broadcast reads one pair wherever it is, so A's
// micro-panel is read packed or, a bf16 A with k contiguous, in place from its rows
// (fn_a_rows): nothing to pack.
// Why 8 rows: 8 divides attention's 64-token tiles, which 12 rows padded to 72 (a ninth of the
// tile products wasted); the loads, 10 per 16 VDPBF16PS, stay within what the core issues
// beside them, so the GEMMs keep their rate (bench/README.md, 2026-12-05, seventeenth
// session).
#include <cstring>

#include "kernels/gemm/epilogue.hpp"
#include "kernels/gemm/finish_registers.hpp"
#include "kernels/gemm/microkernel.hpp"
#include "kernels/gemm/pack.hpp"
#include "kernels/target.hpp"
#include "runtime/aligned_memory.hpp"  // kCacheLine
#include "runtime/cpu_info.hpp"

NANOGPT_ALLOW_AVX512_INTRINSICS

namespace nanogpt {

namespace {

constexpr int64_t kMR = 8, kNR = 32;

// The sum over kc values of k into 16 registers, then either stored to acc or, kFinish, the
// tile finished into C from the registers (finish_registers.hpp).
template <bool kFinish, bool kRowsA>
NANOGPT_TARGET_AVX512BF16 NANOGPT_ALWAYS_INLINE void tile(int64_t kc, const void* a_v,
                                                          int64_t lda_bytes, const void* b_v,
                                                          const float* acc_in, float* acc_out,
                                                          int64_t ld_acc, bool accumulate,
                                                          const TileFinish* finish) {
  const char* a = static_cast<const char*>(a_v);
  const bf16* b = static_cast<const bf16*>(b_v);
  __m512 t[kMR][2];
  start_tile_registers<kMR>(t, acc_in, ld_acc, accumulate);
  // Rows in place: a row pointer per three rows, each with the next two at lda and 2·lda
  // (x86's base + index·scale), so the loop keeps 4 registers of addresses instead of 8 (with
  // one per row, 12 rows made the compiler spill two and reload them every k pair).
  constexpr int kGroups = (kMR + 2) / 3;
  const char* rows_at[kGroups];
  for (int g = 0; g < kGroups; ++g) rows_at[g] = a + 3 * g * lda_bytes;
  for (int64_t kk = 0; kk < kc / 2; ++kk) {
    const __m512bh b0 = (__m512bh)_mm512_loadu_si512(b + kk * 2 * kNR);
    const __m512bh b1 = (__m512bh)_mm512_loadu_si512(b + kk * 2 * kNR + kNR);
#pragma GCC unroll 16
    for (int r = 0; r < kMR; ++r) {
      int32_t pair;
      if constexpr (kRowsA) {
        std::memcpy(&pair, rows_at[r / 3] + (r % 3) * lda_bytes, sizeof pair);
      } else {
        std::memcpy(&pair, a + (kk * kMR + r) * 4, sizeof pair);
      }
      const __m512bh ar = (__m512bh)_mm512_set1_epi32(pair);
      t[r][0] = _mm512_dpbf16_ps(t[r][0], ar, b0);
      t[r][1] = _mm512_dpbf16_ps(t[r][1], ar, b1);
    }
    if constexpr (kRowsA) {
      // The driver calls the kernel down a column of micro-panels, so the next call reads the
      // kMR rows below these, at the same k. Rows read in place are kMR streams lda apart, which
      // the hardware prefetchers did not follow: on Zen 4 the broadcasts waited for their first
      // reads (40% of kernel_a_rows' samples in a cpu-preset step). So each 64 bytes along the
      // rows ask for the same line of the rows below, a whole tile (2,048 VDPBF16PS at K = 256)
      // before it is read. Past the last panel the lines asked for go unused (a prefetch never
      // faults). bench/README.md, 2026-12-07, a twenty-seventh session.
      constexpr int64_t kPairsPerLine = kCacheLine / sizeof(int32_t);
      if (kk % kPairsPerLine == 0) {
        for (int r = 0; r < kMR; ++r) {
          _mm_prefetch(rows_at[r / 3] + (r % 3 + kMR) * lda_bytes, _MM_HINT_T0);
        }
      }
      for (const char*& p : rows_at) p += 4;
    }
  }
  end_tile_registers<kFinish, kMR>(t, acc_out, ld_acc, finish);
}

NANOGPT_TARGET_AVX512BF16 void kernel(int64_t kc, const void* a, const void* b, float* acc,
                                      int64_t ld_acc, bool accumulate) {
  tile<false, false>(kc, a, 0, b, acc, acc, ld_acc, accumulate, nullptr);
}

NANOGPT_TARGET_AVX512BF16 void kernel_a_rows(int64_t kc, const void* a, int64_t lda_bytes,
                                             const void* b, float* acc, int64_t ld_acc,
                                             bool accumulate) {
  tile<false, true>(kc, a, lda_bytes, b, acc, acc, ld_acc, accumulate, nullptr);
}

NANOGPT_TARGET_AVX512BF16 void kernel_finishing(int64_t kc, const void* a, int64_t lda_bytes,
                                                const void* b, const float* acc, int64_t ld_acc,
                                                bool accumulate, const TileFinish& finish) {
  if (lda_bytes != 0) {
    tile<true, true>(kc, a, lda_bytes, b, acc, nullptr, ld_acc, accumulate, &finish);
  } else {
    tile<true, false>(kc, a, 0, b, acc, nullptr, ld_acc, accumulate, &finish);
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
  m.pack_a_across[1] = pack::vnni_pack_a_across_f32;
  m.pack_a_across[2] = pack::vnni_pack_a_across_bf16;
  m.pack_b[1] = pack::vnni_pack_b_f32;
  m.pack_b[2] = pack::vnni_pack_b_bf16;
  m.finish = finish_tile_avx512;
  m.fn_finishing = kernel_finishing;
  m.fn_a_rows = kernel_a_rows;
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
