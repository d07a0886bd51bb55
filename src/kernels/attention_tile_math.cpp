#include "kernels/attention_tile_math.hpp"

#include <algorithm>

#include "kernels/attention_mask.hpp"
#include "kernels/bf16.hpp"
#include "kernels/exp_approx.hpp"
#include "kernels/exp_approx_avx512.hpp"
#include "kernels/gemm/bf16_avx512.hpp"
#include "kernels/target.hpp"
#include "runtime/cpu_info.hpp"
#include "runtime/integer_math.hpp"

NANOGPT_ALLOW_AVX512_INTRINSICS

namespace nanogpt {

NANOGPT_TARGET_CLONES void online_softmax_tile_portable(float* s, int64_t nk, int64_t nq,
                                                        const int32_t* lo, const int32_t* hi,
                                                        bool full, float scale, float* m, float* l,
                                                        float* alpha) {
  // Whole vectors of lanes (16 is a multiple of every clone's width), at most the tile's.
  const int64_t lanes = std::min(round_up(nq, int64_t{16}), kBq);
  float mx[kBq], m_new[kBq], sum[kBq];
  for (int64_t q = 0; q < lanes; ++q) mx[q] = kNegInf;
  for (int32_t j = 0; j < static_cast<int32_t>(nk); ++j) {
    const float* row = s + j * kBq;
    for (int64_t q = 0; q < lanes; ++q) {
      const float x = scale * row[q];
      const bool in = full || (j >= lo[q] && j < hi[q]);
      mx[q] = in && x > mx[q] ? x : mx[q];
    }
  }
  for (int64_t q = 0; q < lanes; ++q) {
    m_new[q] = mx[q] > m[q] ? mx[q] : m[q];
    // Nothing visible yet leaves m at -inf, and -inf − -inf would be NaN.
    alpha[q] = mx[q] == kNegInf ? 1.0f : exp_approx(m[q] - m_new[q]);  // 0 on the first visit
    sum[q] = 0.0f;
  }
  for (int32_t j = 0; j < static_cast<int32_t>(nk); ++j) {
    float* row = s + j * kBq;
    for (int64_t q = 0; q < lanes; ++q) {
      const bool in = full || (j >= lo[q] && j < hi[q]);
      const float e = in ? exp_approx(scale * row[q] - m_new[q]) : 0.0f;
      row[q] = e;
      sum[q] += e;
    }
  }
  for (int64_t q = 0; q < lanes; ++q) {
    l[q] = l[q] * alpha[q] + sum[q];
    m[q] = m_new[q];
  }
}

NANOGPT_TARGET_CLONES void probs_and_grads_tile_portable(float* s, float* dp, int64_t nq,
                                                         const int32_t* lo, const int32_t* hi,
                                                         float scale, const float* lse,
                                                         const float* delta) {
  for (int64_t i = 0; i < nq; ++i) {
    const int32_t a = lo[i], b = hi[i];
    const float shift = lse[i], d = delta[i];
    float* si = s + i * kBk;
    float* dpi = dp + i * kBk;
    for (int32_t j = 0; j < static_cast<int32_t>(kBk); ++j) {
      const bool in = j >= a && j < b;
      const float pij = in ? exp_approx(scale * si[j] - shift) : 0.0f;
      si[j] = pij;
      // Hidden pairs' dS is 0 whatever dp holds there: a product told the causal rule leaves
      // hidden micro-tiles of dp as they were (TileGemm::product).
      dpi[j] = in ? scale * pij * (dpi[j] - d) : 0.0f;
    }
  }
}

namespace {

// The loops above on 16 lanes of AVX-512 with exp_approx_avx512 (kernels/exp_approx_avx512.hpp):
// the same operations, so the same bits as their AVX-512 clones, in half the time.

// Lanes of queries [16·v, 16·v + 16) that see key j: all, or those with lo ≤ j < hi.
NANOGPT_TARGET_AVX512 NANOGPT_ALWAYS_INLINE __mmask16 sees_key(bool full, int32_t j,
                                                               const int32_t* lo, const int32_t* hi,
                                                               int64_t v) {
  if (full) return 0xFFFF;
  const __m512i vj = _mm512_set1_epi32(j);
  return _mm512_cmp_epi32_mask(vj, _mm512_loadu_si512(lo + 16 * v), _MM_CMPINT_NLT) &
         _mm512_cmp_epi32_mask(vj, _mm512_loadu_si512(hi + 16 * v), _MM_CMPINT_LT);
}

NANOGPT_TARGET_AVX512 void online_softmax_tile_avx512(float* s, int64_t nk, int64_t nq,
                                                      const int32_t* lo, const int32_t* hi,
                                                      bool full, float scale, float* m, float* l,
                                                      float* alpha) {
  constexpr int64_t kVectors = kBq / 16;
  const int64_t vectors = std::min(ceil_div(nq, int64_t{16}), kVectors);
  const __m512 vscale = _mm512_set1_ps(scale), neg_inf = _mm512_set1_ps(kNegInf);
  __m512 mx[kVectors], m_new[kVectors], sum[kVectors];
  for (int64_t v = 0; v < vectors; ++v) mx[v] = neg_inf;
  for (int32_t j = 0; j < static_cast<int32_t>(nk); ++j) {
    const float* row = s + j * kBq;
    for (int64_t v = 0; v < vectors; ++v) {
      const __m512 x = _mm512_mul_ps(vscale, _mm512_loadu_ps(row + 16 * v));
      const __mmask16 greater =
          _mm512_mask_cmp_ps_mask(sees_key(full, j, lo, hi, v), x, mx[v], _CMP_GT_OQ);
      mx[v] = _mm512_mask_mov_ps(mx[v], greater, x);
    }
  }
  for (int64_t v = 0; v < vectors; ++v) {
    const __m512 m_old = _mm512_loadu_ps(m + 16 * v);
    m_new[v] = _mm512_mask_mov_ps(m_old, _mm512_cmp_ps_mask(mx[v], m_old, _CMP_GT_OQ), mx[v]);
    const __m512 a = exp_approx_avx512(_mm512_sub_ps(m_old, m_new[v]));
    const __mmask16 none_seen = _mm512_cmp_ps_mask(mx[v], neg_inf, _CMP_EQ_OQ);
    _mm512_storeu_ps(alpha + 16 * v, _mm512_mask_mov_ps(a, none_seen, _mm512_set1_ps(1.0f)));
    sum[v] = _mm512_setzero_ps();
  }
  for (int32_t j = 0; j < static_cast<int32_t>(nk); ++j) {
    float* row = s + j * kBq;
    for (int64_t v = 0; v < vectors; ++v) {
      // Hidden keys go in as -inf, whose exponential is exactly 0.
      const __m512 x =
          _mm512_sub_ps(_mm512_mul_ps(vscale, _mm512_loadu_ps(row + 16 * v)), m_new[v]);
      const __m512 e =
          exp_approx_avx512(_mm512_mask_mov_ps(neg_inf, sees_key(full, j, lo, hi, v), x));
      _mm512_storeu_ps(row + 16 * v, e);
      sum[v] = _mm512_add_ps(sum[v], e);
    }
  }
  for (int64_t v = 0; v < vectors; ++v) {
    const __m512 l_old = _mm512_loadu_ps(l + 16 * v), a = _mm512_loadu_ps(alpha + 16 * v);
    _mm512_storeu_ps(l + 16 * v, _mm512_add_ps(_mm512_mul_ps(l_old, a), sum[v]));
    _mm512_storeu_ps(m + 16 * v, m_new[v]);
  }
}

NANOGPT_TARGET_AVX512 void probs_and_grads_tile_avx512(float* s, float* dp, int64_t nq,
                                                       const int32_t* lo, const int32_t* hi,
                                                       float scale, const float* lse,
                                                       const float* delta) {
  static_assert(kBk % 16 == 0, "a backward tile's row is whole vectors");
  const __m512 vscale = _mm512_set1_ps(scale), neg_inf = _mm512_set1_ps(kNegInf);
  const __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  for (int64_t i = 0; i < nq; ++i) {
    const __m512i a = _mm512_set1_epi32(lo[i]), b = _mm512_set1_epi32(hi[i]);
    const __m512 shift = _mm512_set1_ps(lse[i]), d = _mm512_set1_ps(delta[i]);
    float* si = s + i * kBk;
    float* dpi = dp + i * kBk;
    for (int32_t j = 0; j < static_cast<int32_t>(kBk); j += 16) {
      const __m512i key = _mm512_add_epi32(_mm512_set1_epi32(j), lane);
      const __mmask16 in = _mm512_cmp_epi32_mask(key, a, _MM_CMPINT_NLT) &
                           _mm512_cmp_epi32_mask(key, b, _MM_CMPINT_LT);
      const __m512 x = _mm512_sub_ps(_mm512_mul_ps(vscale, _mm512_loadu_ps(si + j)), shift);
      const __m512 pij = exp_approx_avx512(_mm512_mask_mov_ps(neg_inf, in, x));
      _mm512_storeu_ps(si + j, pij);
      // dS is 0 where hidden whatever dp holds there (probs_and_grads_tile_portable).
      const __m512 g =
          _mm512_mul_ps(_mm512_mul_ps(vscale, pij), _mm512_sub_ps(_mm512_loadu_ps(dpi + j), d));
      _mm512_storeu_ps(dpi + j, _mm512_maskz_mov_ps(in, g));
    }
  }
}

NANOGPT_TARGET_AVX512 void round_row_to_bf16_avx512(const float* src, int64_t n, float* dst) {
  const __m512i high_half = _mm512_set1_epi32(static_cast<int>(0xFFFF0000u));
  for (int64_t e = 0; e < n; e += 16) {
    const __mmask16 m = first_lanes(n - e);
    const __m512i hi = bf16_round_hi(_mm512_castps_si512(_mm512_maskz_loadu_ps(m, src + e)));
    _mm512_mask_storeu_ps(dst + e, m, _mm512_castsi512_ps(_mm512_and_si512(hi, high_half)));
  }
}

}  // namespace

void online_softmax_tile(float* s, int64_t nk, int64_t nq, const int32_t* lo, const int32_t* hi,
                         bool full, float scale, float* m, float* l, float* alpha) {
  if (cpu_info().avx512f) {
    online_softmax_tile_avx512(s, nk, nq, lo, hi, full, scale, m, l, alpha);
    return;
  }
  online_softmax_tile_portable(s, nk, nq, lo, hi, full, scale, m, l, alpha);
}

void probs_and_grads_tile(float* s, float* dp, int64_t nq, const int32_t* lo, const int32_t* hi,
                          float scale, const float* lse, const float* delta) {
  if (cpu_info().avx512f) {
    probs_and_grads_tile_avx512(s, dp, nq, lo, hi, scale, lse, delta);
    return;
  }
  probs_and_grads_tile_portable(s, dp, nq, lo, hi, scale, lse, delta);
}

void round_row_to_bf16(const float* src, int64_t n, float* dst) {
  if (cpu_info().avx512f) {
    round_row_to_bf16_avx512(src, n, dst);
    return;
  }
  for (int64_t e = 0; e < n; ++e) dst[e] = round_to_bf16(src[e]);
}

NANOGPT_TARGET_CLONES void scale_rows(float* o, int64_t rows, int64_t n, const float* alpha) {
  for (int64_t i = 0; i < rows; ++i) {
    if (alpha[i] == 1.0f) continue;
    for (int64_t e = 0; e < n; ++e) o[i * n + e] *= alpha[i];
  }
}

}  // namespace nanogpt
