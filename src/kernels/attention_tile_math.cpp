#include "kernels/attention_tile_math.hpp"

#include <algorithm>

#include "kernels/attention_mask.hpp"
#include "kernels/bf16.hpp"
#include "kernels/exp_approx.hpp"
#include "kernels/gemm/bf16_avx512.hpp"
#include "kernels/target.hpp"
#include "runtime/cpu_info.hpp"
#include "runtime/integer_math.hpp"

NANOGPT_ALLOW_AVX512_INTRINSICS

namespace nanogpt {

NANOGPT_TARGET_CLONES void online_softmax_tile(float* s, int64_t nk, int64_t nq, const int32_t* lo,
                                               const int32_t* hi, bool full, float scale, float* m,
                                               float* l, float* alpha) {
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

NANOGPT_TARGET_CLONES void probs_and_grads_tile(float* s, float* dp, int64_t nq, const int32_t* lo,
                                                const int32_t* hi, float scale, const float* lse,
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

NANOGPT_TARGET_AVX512 void round_row_to_bf16_avx512(const float* src, int64_t n, float* dst) {
  const __m512i high_half = _mm512_set1_epi32(static_cast<int>(0xFFFF0000u));
  for (int64_t e = 0; e < n; e += 16) {
    const __mmask16 m =
        n - e >= 16 ? static_cast<__mmask16>(0xFFFF) : static_cast<__mmask16>((1u << (n - e)) - 1);
    const __m512i hi = bf16_round_hi(_mm512_castps_si512(_mm512_maskz_loadu_ps(m, src + e)));
    _mm512_mask_storeu_ps(dst + e, m, _mm512_castsi512_ps(_mm512_and_si512(hi, high_half)));
  }
}

}  // namespace

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
