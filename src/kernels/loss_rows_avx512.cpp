#include "kernels/loss_rows_avx512.hpp"

#include <algorithm>
#include <atomic>

#include "kernels/exp_approx_avx512.hpp"
#include "kernels/gemm/bf16_avx512.hpp"
#include "kernels/target.hpp"
#include "runtime/cpu_info.hpp"

NANOGPT_ALLOW_AVX512_INTRINSICS

namespace nanogpt {

namespace {

std::atomic<bool> use_avx512_rows{true};

}  // namespace

NANOGPT_TARGET_AVX512BW void exp_neg_scaled_row_avx512(float* v, int64_t n, float inv_divisor) {
  const __m512 s = _mm512_set1_ps(inv_divisor);
  const __m512i sign = _mm512_set1_epi32(static_cast<int>(0x80000000u));
  for (int64_t j = 0; j < n; j += 16) {
    const __mmask16 in = first_lanes(n - j);
    const __m512 x = _mm512_mul_ps(_mm512_maskz_loadu_ps(in, v + j), s);
    const __m512 neg = _mm512_castsi512_ps(_mm512_xor_si512(_mm512_castps_si512(x), sign));
    _mm512_mask_storeu_ps(v + j, in, exp_approx_avx512(neg));
  }
}

NANOGPT_TARGET_AVX512BW float sum_exp_row_avx512(const float* v, int64_t n, float m, bool capped,
                                                 float softcap, float slope, float* keep_q,
                                                 float* keep_dydz) {
  const __m512 vm = _mm512_set1_ps(m), cap = _mm512_set1_ps(softcap), one = _mm512_set1_ps(1.0f);
  const __m512 vslope = _mm512_set1_ps(slope);
  __m512 lanes = _mm512_setzero_ps();
  for (int64_t j = 0; j < n; j += 16) {
    const __mmask16 in = first_lanes(n - j);
    const __m512 e = _mm512_maskz_loadu_ps(in, v + j);
    __m512 y = e, sigma = one;
    if (capped) {
      sigma = _mm512_div_ps(one, _mm512_add_ps(one, e));
      y = _mm512_mul_ps(cap, sigma);
    }
    // Lanes past the row add +0 (the sum is of q ≥ 0, so never −0: its bits stay).
    const __m512 q = _mm512_maskz_mov_ps(in, exp_approx_avx512(_mm512_sub_ps(y, vm)));
    if (keep_q != nullptr) {
      _mm512_mask_storeu_ps(keep_q + j, in, q);
      if (capped) {
        const __m512 dydz = _mm512_mul_ps(_mm512_mul_ps(vslope, _mm512_mul_ps(e, sigma)), sigma);
        _mm512_mask_storeu_ps(keep_dydz + j, in, dydz);
      }
    }
    lanes = _mm512_add_ps(lanes, q);
  }
  // The scalar loop's pairwise combination, in its order.
  alignas(64) float l[16];
  _mm512_store_ps(l, lanes);
  for (int width = 8; width > 0; width /= 2) {
    for (int i = 0; i < width; ++i) l[i] += l[i + width];
  }
  return l[0];
}

NANOGPT_TARGET_AVX512BW void grad_row_bf16_avx512(const float* q, const float* dydz,
                                                  float uncapped_slope, float inv_s, float weight,
                                                  int64_t target, int64_t n, bf16* g) {
  const __m512 vinv_s = _mm512_set1_ps(inv_s), vweight = _mm512_set1_ps(weight);
  const __m512 one = _mm512_set1_ps(1.0f), zero = _mm512_setzero_ps();
  const __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  for (int64_t j = 0; j < n; j += 16) {
    const __mmask16 in = first_lanes(n - j);
    const __m512 slope =
        dydz != nullptr ? _mm512_maskz_loadu_ps(in, dydz + j) : _mm512_set1_ps(uncapped_slope);
    const __m512 p = _mm512_mul_ps(_mm512_maskz_loadu_ps(in, q + j), vinv_s);
    // The target's lane, if it is among these (target − j is in [0, 16) only then).
    const __mmask16 is_target = _mm512_cmpeq_epi32_mask(
        lane, _mm512_set1_epi32(static_cast<int32_t>(std::clamp<int64_t>(target - j, -1, 16))));
    const __m512 gj = _mm512_mul_ps(
        _mm512_mul_ps(_mm512_sub_ps(p, _mm512_mask_mov_ps(zero, is_target, one)), slope), vweight);
    const __m512i hi = bf16_round_hi(_mm512_castps_si512(gj));
    _mm256_mask_storeu_epi16(g + j, in, _mm512_cvtepi32_epi16(_mm512_srli_epi32(hi, 16)));
  }
}

bool set_loss_rows_avx512(bool enabled) {
  return use_avx512_rows.exchange(enabled);
}

bool loss_rows_avx512() {
  return use_avx512_rows.load(std::memory_order_relaxed) && cpu_info().avx512f &&
         cpu_info().avx512bw && cpu_info().avx512vl;
}

}  // namespace nanogpt
