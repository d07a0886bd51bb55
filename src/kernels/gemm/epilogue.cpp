#include "kernels/gemm/epilogue.hpp"

#include <algorithm>
#include <cmath>

#include "kernels/bf16.hpp"
#include "kernels/gemm/bf16_avx512.hpp"
#include "kernels/target.hpp"

NANOGPT_ALLOW_AVX512_INTRINSICS

namespace nanogpt {

namespace {

// relu²'s backward from its output h: 2·√h·g where h > 0, else 0 (NaN h too).
__attribute__((always_inline)) inline float relu_squared_grad(float h, float g) {
  return h > 0.0f ? (2.0f * std::sqrt(h)) * g : 0.0f;
}

// One row of a finished tile, in place in o: alpha·acc (+ beta·o), then the epilogue.
__attribute__((always_inline)) inline void finish_row(const float* a, int64_t cols, float alpha,
                                                      float beta, float* o, const GemmEpilogue* ep,
                                                      int64_t row, int64_t col) {
  if (beta == 0.0f) {
    for (int64_t j = 0; j < cols; ++j) o[j] = alpha * a[j];
  } else {
    for (int64_t j = 0; j < cols; ++j) o[j] = alpha * a[j] + beta * o[j];
  }
  if (ep == nullptr) return;
  if (ep->addend != nullptr) {
    const float* d = ep->addend + row * ep->ld_addend + col;
    for (int64_t j = 0; j < cols; ++j) o[j] = std::fma(ep->addend_scale, d[j], o[j]);
  }
  if (ep->relu_squared_output != nullptr) {
    const float* h = ep->relu_squared_output + row * ep->ld_relu_squared_output + col;
    for (int64_t j = 0; j < cols; ++j) o[j] = relu_squared_grad(h[j], o[j]);
  }
  if (ep->relu_squared_output_bf16 != nullptr) {
    const bf16* h = ep->relu_squared_output_bf16 + row * ep->ld_relu_squared_output + col;
    for (int64_t j = 0; j < cols; ++j) o[j] = relu_squared_grad(to_float(h[j]), o[j]);
  }
  if (ep->relu_squared) {
    for (int64_t j = 0; j < cols; ++j) {
      const float v = std::max(o[j], 0.0f);
      o[j] = v * v;
    }
  }
  if (ep->c_bf16 != nullptr) {
    bf16* cb = ep->c_bf16 + row * ep->ld_c_bf16 + col;
    for (int64_t j = 0; j < cols; ++j) cb[j] = to_bf16(o[j]);
  }
}

template <int kDummy>
__attribute__((always_inline)) inline void finish_portable(const float* acc, int64_t ld_acc,
                                                           int64_t rows, int64_t cols, float alpha,
                                                           float beta, float* c, int64_t ldc,
                                                           const GemmEpilogue* ep, int64_t row,
                                                           int64_t col) {
  if (ep != nullptr && ep->c_bf16_only) {
    // No C: each row is finished in a few columns at a time here, on its way to c_bf16 (beta
    // is 0, so nothing is read from C either).
    constexpr int64_t kChunk = 64;
    float o[kChunk];
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t j0 = 0; j0 < cols; j0 += kChunk) {
        finish_row(acc + r * ld_acc + j0, std::min(kChunk, cols - j0), alpha, 0.0f, o, ep, row + r,
                   col + j0);
      }
    }
    return;
  }
  for (int64_t r = 0; r < rows; ++r) {
    finish_row(acc + r * ld_acc, cols, alpha, beta, c + r * ldc, ep, row + r, col);
  }
}

}  // namespace

void finish_tile_scalar(const float* acc, int64_t ld_acc, int64_t rows, int64_t cols, float alpha,
                        float beta, float* c, int64_t ldc, const GemmEpilogue* ep, int64_t row,
                        int64_t col) {
  finish_portable<0>(acc, ld_acc, rows, cols, alpha, beta, c, ldc, ep, row, col);
}

// The same loops, vectorised by the compiler for AVX2.
NANOGPT_TARGET_AVX2 void finish_tile_avx2(const float* acc, int64_t ld_acc, int64_t rows,
                                          int64_t cols, float alpha, float beta, float* c,
                                          int64_t ldc, const GemmEpilogue* ep, int64_t row,
                                          int64_t col) {
  finish_portable<1>(acc, ld_acc, rows, cols, alpha, beta, c, ldc, ep, row, col);
}

namespace {

template <bool kStream>
NANOGPT_TARGET_AVX512BW NANOGPT_ALWAYS_INLINE void finish_avx512(
    const float* acc, int64_t ld_acc, int64_t rows, int64_t cols, float alpha, float beta, float* c,
    int64_t ldc, const GemmEpilogue* ep, int64_t row, int64_t col) {
  const __m512 va = _mm512_set1_ps(alpha), vb = _mm512_set1_ps(beta), zero = _mm512_setzero_ps();
  const __m512 two = _mm512_set1_ps(2.0f);
  const float* add_base = ep != nullptr ? ep->addend : nullptr;
  const __m512 add_scale = _mm512_set1_ps(ep != nullptr ? ep->addend_scale : 0.0f);
  const float* rh_base = ep != nullptr ? ep->relu_squared_output : nullptr;
  const bf16* rh16_base = ep != nullptr ? ep->relu_squared_output_bf16 : nullptr;
  const bool relu_squared = ep != nullptr && ep->relu_squared;
  bf16* cb_base = ep != nullptr ? ep->c_bf16 : nullptr;
  const bool store_c = ep == nullptr || !ep->c_bf16_only;  // else C is null and beta 0
  for (int64_t r = 0; r < rows; ++r) {
    const float* a = acc + r * ld_acc;
    float* o = store_c ? c + r * ldc : nullptr;
    const float* add = add_base != nullptr ? add_base + (row + r) * ep->ld_addend + col : nullptr;
    const int64_t rh_at = (row + r) * (ep != nullptr ? ep->ld_relu_squared_output : 0) + col;
    const float* rh = rh_base != nullptr ? rh_base + rh_at : nullptr;
    const bf16* rh16 = rh16_base != nullptr ? rh16_base + rh_at : nullptr;
    bf16* cb = cb_base != nullptr ? cb_base + (row + r) * ep->ld_c_bf16 + col : nullptr;
    // The driver finishes the tiles of a column of C top to bottom: fetch the rows of the
    // addend and of the relu² output the tile below reads (a tile's rows are too short, and too
    // far apart, for the hardware prefetchers to find). For the addend (the residual the
    // branches' projections add, Newton–Schulz's a·X) this took attn.c_proj's forward from 65 to
    // 40 ms per 4 steps of the cpu preset on the AMX Xeon, where the AMX tiles finish here.
    if (add != nullptr) {
      const float* below = add + rows * ep->ld_addend;
      for (int64_t j = 0; j < cols; j += 16)
        _mm_prefetch(reinterpret_cast<const char*>(below + j), _MM_HINT_T0);
    }
    if (rh != nullptr) {
      const float* below = rh + rows * ep->ld_relu_squared_output;
      for (int64_t j = 0; j < cols; j += 16)
        _mm_prefetch(reinterpret_cast<const char*>(below + j), _MM_HINT_T0);
    }
    if (rh16 != nullptr) {
      const bf16* below = rh16 + rows * ep->ld_relu_squared_output;
      for (int64_t j = 0; j < cols; j += 32)
        _mm_prefetch(reinterpret_cast<const char*>(below + j), _MM_HINT_T0);
    }
    for (int64_t j = 0; j < cols; j += 16) {
      const __mmask16 m = first_lanes(cols - j);
      __m512 v = _mm512_mul_ps(va, _mm512_maskz_loadu_ps(m, a + j));
      if (beta != 0.0f) v = _mm512_fmadd_ps(vb, _mm512_maskz_loadu_ps(m, o + j), v);
      if (add != nullptr) v = _mm512_fmadd_ps(add_scale, _mm512_maskz_loadu_ps(m, add + j), v);
      if (rh != nullptr || rh16 != nullptr) {
        const __m512 h = rh != nullptr ? _mm512_maskz_loadu_ps(m, rh + j)
                                       : _mm512_castsi512_ps(bf16_load_hi(rh16 + j, m));
        // Ordered compare: false for NaN, so those lanes become 0 as in the portable loop.
        const __mmask16 pos = _mm512_cmp_ps_mask(h, zero, _CMP_GT_OQ);
        v = _mm512_maskz_mul_ps(pos, _mm512_mul_ps(two, _mm512_sqrt_ps(h)), v);
      }
      if (relu_squared) {
        const __m512 p = _mm512_max_ps(zero, v);  // NaN stays NaN, as std::max(NaN, 0)
        v = _mm512_mul_ps(p, p);
      }
      if (store_c) {
        if (kStream && m == 0xFFFF) {
          _mm512_stream_ps(o + j, v);
        } else {
          _mm512_mask_storeu_ps(o + j, m, v);
        }
      }
      if (cb != nullptr) {
        const __m512i h = _mm512_srli_epi32(bf16_round_hi(_mm512_castps_si512(v)), 16);
        if (kStream && m == 0xFFFF) {
          _mm256_stream_si256(reinterpret_cast<__m256i*>(cb + j), _mm512_cvtepi32_epi16(h));
        } else {
          _mm256_mask_storeu_epi16(cb + j, m, _mm512_cvtepi32_epi16(h));
        }
      }
    }
  }
}

}  // namespace

NANOGPT_TARGET_AVX512BW void finish_tile_avx512(const float* acc, int64_t ld_acc, int64_t rows,
                                                int64_t cols, float alpha, float beta, float* c,
                                                int64_t ldc, const GemmEpilogue* ep, int64_t row,
                                                int64_t col) {
  finish_avx512<false>(acc, ld_acc, rows, cols, alpha, beta, c, ldc, ep, row, col);
}

NANOGPT_TARGET_AVX512BW void stream_tile_avx512(const float* acc, int64_t ld_acc, int64_t rows,
                                                int64_t cols, float alpha, float beta, float* c,
                                                int64_t ldc, const GemmEpilogue* ep, int64_t row,
                                                int64_t col) {
  finish_avx512<true>(acc, ld_acc, rows, cols, alpha, beta, c, ldc, ep, row, col);
}

}  // namespace nanogpt
