// A tile's fp32 sum finished into C straight from the micro-kernel's registers, with the
// arithmetic of finish_tile_avx512 (epilogue.cpp): v = alpha·acc, then fma(beta, C, v) where beta
// is not 0, then fma(addend_scale, addend, v) where there is an addend, stored under masks for
// a partial tile. For the vector kernels' last K block of a tile whose epilogue is at most an
// addend (MicroKernel::fn_finishing): the same bits as storing the sum and finishing it,
// without the sum's round trip through memory. Also the two ends every such
// kernel shares: the carried sum loaded into the registers, and the sum stored or finished.
#pragma once

#include <cstdint>

#include "kernels/gemm/microkernel.hpp"
#include "kernels/target.hpp"

NANOGPT_ALLOW_AVX512_INTRINSICS

namespace nanogpt {

// t[r][0..1]: row r's 32 columns; f.rows and f.cols: the part of the tile inside C.
template <int kMR>
NANOGPT_TARGET_AVX512 NANOGPT_ALWAYS_INLINE void finish_from_registers(const __m512 (&t)[kMR][2],
                                                                       const TileFinish& f) {
  const float alpha = f.alpha, beta = f.beta;
  float* const c = f.c;
  const int64_t ldc = f.ldc, rows = f.rows, cols = f.cols;
  const __m512 va = _mm512_set1_ps(alpha), vb = _mm512_set1_ps(beta);
  const __m512 add_scale = _mm512_set1_ps(f.addend_scale);
  const __mmask16 m0 = first_lanes(cols), m1 = first_lanes(cols - 16);
#pragma GCC unroll 16
  for (int r = 0; r < kMR; ++r) {
    if (r >= rows) break;
    float* o = c + r * ldc;
    __m512 v0 = _mm512_mul_ps(va, t[r][0]), v1 = _mm512_mul_ps(va, t[r][1]);
    if (beta != 0.0f) {
      v0 = _mm512_fmadd_ps(vb, _mm512_maskz_loadu_ps(m0, o), v0);
      v1 = _mm512_fmadd_ps(vb, _mm512_maskz_loadu_ps(m1, o + 16), v1);
    }
    if (f.addend != nullptr) {
      const float* d = f.addend + r * f.ld_addend;
      v0 = _mm512_fmadd_ps(add_scale, _mm512_maskz_loadu_ps(m0, d), v0);
      v1 = _mm512_fmadd_ps(add_scale, _mm512_maskz_loadu_ps(m1, d + 16), v1);
    }
    _mm512_mask_storeu_ps(o, m0, v0);
    _mm512_mask_storeu_ps(o + 16, m1, v1);
  }
}

// The registers a tile's sum starts from: the carried sum in acc (accumulate) or zero.
template <int kMR>
NANOGPT_TARGET_AVX512 NANOGPT_ALWAYS_INLINE void start_tile_registers(__m512 (&t)[kMR][2],
                                                                      const float* acc,
                                                                      int64_t ld_acc,
                                                                      bool accumulate) {
#pragma GCC unroll 16
  for (int r = 0; r < kMR; ++r) {
    t[r][0] = accumulate ? _mm512_loadu_ps(acc + r * ld_acc) : _mm512_setzero_ps();
    t[r][1] = accumulate ? _mm512_loadu_ps(acc + r * ld_acc + 16) : _mm512_setzero_ps();
  }
}

// The tile's sum stored to acc (kFinish false: finished later, or carried to the next K block)
// or finished into C from the registers (finish_from_registers).
template <bool kFinish, int kMR>
NANOGPT_TARGET_AVX512 NANOGPT_ALWAYS_INLINE void end_tile_registers(const __m512 (&t)[kMR][2],
                                                                    float* acc, int64_t ld_acc,
                                                                    const TileFinish* finish) {
  if constexpr (!kFinish) {
#pragma GCC unroll 16
    for (int r = 0; r < kMR; ++r) {
      _mm512_storeu_ps(acc + r * ld_acc, t[r][0]);
      _mm512_storeu_ps(acc + r * ld_acc + 16, t[r][1]);
    }
  } else {
    finish_from_registers<kMR>(t, *finish);
  }
}

}  // namespace nanogpt
