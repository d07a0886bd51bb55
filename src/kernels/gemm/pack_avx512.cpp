// AVX-512 packers into the bf16 pair layouts: AMX (layout::amx_a, amx_b) and VNNI
// (layout::vnni_a, vnni_b). All are built from 16×16 blocks of 32-bit pairs Y[i][2kk..2kk+1],
// with Y = op(A) or op(B)ᵀ. A source contiguous in k gives a block's rows (by i) directly; one
// contiguous in i gives its columns (by k pair, two k rows interleaved). An AMX A tile wants
// rows, an AMX B tile and a VNNI panel want columns, so at most one transpose per block.
// Their kernels need AVX512-BF16 (isa.cpp, microkernel_dispatch.cpp), so fp32 is rounded to bf16
// by VCVTNE2PS2BF16, 32 values an instruction, bit for bit as to_bf16 (bf16.hpp) does it; the
// fp32-layout packers, which also run on CPUs without it, round in integer arithmetic.
#include <algorithm>
#include <type_traits>

#include "kernels/gemm/bf16_avx512.hpp"
#include "kernels/gemm/pack.hpp"
#include "kernels/target.hpp"
#include "runtime/cpu_info.hpp"

NANOGPT_ALLOW_AVX512_INTRINSICS

namespace nanogpt::pack {

namespace {

#define NANOGPT_AVX512BW NANOGPT_TARGET_AVX512BW NANOGPT_ALWAYS_INLINE
#define NANOGPT_AVX512BF16 NANOGPT_TARGET_AVX512BF16 NANOGPT_ALWAYS_INLINE

// 16 pairs (lo[e], hi[e]) of bf16 from fp32 lo and hi, rounded: VCVTNE2PS2BF16 puts lo's 16
// values in words 0..15 and hi's in 16..31, then they are interleaved.
NANOGPT_AVX512BF16 __m512i rounded_pairs(__m512 lo, __m512 hi) {
  const __m512i interleave =
      _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8, 23, 7, 22, 6,
                       21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
  return _mm512_permutexvar_epi16(interleave,
                                  reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(hi, lo)));
}

// 16 pairs (lo[e], hi[e]) from 16 bf16 each.
NANOGPT_AVX512BW __m512i word_pairs(__m256i lo, __m256i hi) {
  return _mm512_or_si512(_mm512_cvtepu16_epi32(lo),
                         _mm512_slli_epi32(_mm512_cvtepu16_epi32(hi), 16));
}

// 16 masked lanes (zero elsewhere) of two rows, as 16 pairs (lo[e], hi[e]) of bf16.
NANOGPT_AVX512BF16 __m512i load_pair_rows(const float* lo, const float* hi, __mmask16 m_lo,
                                          __mmask16 m_hi) {
  return rounded_pairs(_mm512_maskz_loadu_ps(m_lo, lo), _mm512_maskz_loadu_ps(m_hi, hi));
}

NANOGPT_AVX512BF16 __m512i load_pair_rows(const bf16* lo, const bf16* hi, __mmask16 m_lo,
                                          __mmask16 m_hi) {
  return word_pairs(_mm256_maskz_loadu_epi16(m_lo, lo), _mm256_maskz_loadu_epi16(m_hi, hi));
}

// 32 consecutive values (n of them valid) as 16 pairs, in order.
NANOGPT_AVX512BF16 __m512i load_pairs(const float* p, int64_t n) {
  const __mmask16 m0 = first_lanes(n), m1 = first_lanes(n - 16);
  // Words 0..15 from the first 16 values, 16..31 from the next: already in order.
  return reinterpret_cast<__m512i>(
      _mm512_cvtne2ps_pbh(_mm512_maskz_loadu_ps(m1, p + 16), _mm512_maskz_loadu_ps(m0, p)));
}

NANOGPT_AVX512BF16 __m512i load_pairs(const bf16* p, int64_t n) {
  const __mmask32 m = first_lanes32(n);
  return _mm512_maskz_loadu_epi16(m, p);
}

NANOGPT_AVX512BW void transpose16(__m512i r[16]) {
  __m512i t[16];
  for (int i = 0; i < 16; i += 2) {
    t[i] = _mm512_unpacklo_epi32(r[i], r[i + 1]);
    t[i + 1] = _mm512_unpackhi_epi32(r[i], r[i + 1]);
  }
  for (int i = 0; i < 16; i += 4) {
    r[i] = _mm512_unpacklo_epi64(t[i], t[i + 2]);
    r[i + 1] = _mm512_unpackhi_epi64(t[i], t[i + 2]);
    r[i + 2] = _mm512_unpacklo_epi64(t[i + 1], t[i + 3]);
    r[i + 3] = _mm512_unpackhi_epi64(t[i + 1], t[i + 3]);
  }
  // Now r[4q + j] holds, in each 128-bit lane L, row 4L.. of column group (q, j).
  for (int i = 0; i < 4; ++i) {
    t[i] = _mm512_shuffle_i32x4(r[i], r[i + 4], 0x88);
    t[i + 4] = _mm512_shuffle_i32x4(r[i], r[i + 4], 0xDD);
    t[i + 8] = _mm512_shuffle_i32x4(r[i + 8], r[i + 12], 0x88);
    t[i + 12] = _mm512_shuffle_i32x4(r[i + 8], r[i + 12], 0xDD);
  }
  for (int i = 0; i < 4; ++i) {
    r[i] = _mm512_shuffle_i32x4(t[i], t[i + 8], 0x88);
    r[i + 4] = _mm512_shuffle_i32x4(t[i + 4], t[i + 12], 0x88);
    r[i + 8] = _mm512_shuffle_i32x4(t[i], t[i + 8], 0xDD);
    r[i + 12] = _mm512_shuffle_i32x4(t[i + 4], t[i + 12], 0xDD);
  }
}

// The 16×16 block of pairs of rows [i0, i0 + rows) of Y and k in [k0, k0 + 32) (zero past
// rows and k_valid), in v. Returns true if v[j] holds k pair j (the block's columns), false if
// it holds row i0 + j: whichever the source gives without a transpose.
template <class T>
NANOGPT_AVX512BF16 bool load_block(const T* src, int64_t ld, Trans trans, int64_t i0, int64_t rows,
                                   int64_t k0, int64_t k_valid, __m512i v[16]) {
  if (trans == Trans::kNo) {
    const int64_t n = k_valid - k0 < 0 ? 0 : k_valid - k0;
    for (int i = 0; i < 16; ++i) {
      v[i] = i < rows && n > 0 ? load_pairs(src + (i0 + i) * ld + k0, n) : _mm512_setzero_si512();
    }
    return false;
  }
  const __mmask16 m = first_lanes(rows);
  for (int kk = 0; kk < 16; ++kk) {
    const int64_t k = k0 + 2 * kk;
    // Rows past k_valid read nothing (a zero mask); k itself may be the last valid one.
    const __mmask16 m_lo = k < k_valid ? m : 0, m_hi = k + 1 < k_valid ? m : 0;
    const T* lo = src + (k < k_valid ? k : 0) * ld + i0;
    const T* hi = src + (k + 1 < k_valid ? k + 1 : 0) * ld + i0;
    v[kk] = load_pair_rows(lo, hi, m_lo, m_hi);
  }
  return true;
}

int64_t clamp16(int64_t x) {
  return x < 0 ? 0 : x > 16 ? 16 : x;
}

// One 32-wide AMX micro-panel: per k step, two tiles of 16 rows of 64 bytes; A tiles hold
// rows of Y (pairs along the row), B tiles k pairs (pairs along the columns).
template <class T, bool kIsB>
NANOGPT_TARGET_AVX512BF16 void amx_panel(const void* src_v, int64_t ld, Trans trans, int64_t first,
                                         int64_t valid, int64_t k_valid, int64_t kp, void* out_v) {
  const T* src = static_cast<const T*>(src_v) + (trans == Trans::kNo ? first * ld : first);
  bf16* out = static_cast<bf16*>(out_v);
  for (int64_t k0 = 0; k0 < kp; k0 += 32) {
    for (int64_t half = 0; half < 2; ++half) {
      __m512i v[16];
      const bool by_kk =
          load_block(src, ld, trans, half * 16, clamp16(valid - half * 16), k0, k_valid, v);
      if (by_kk != kIsB) transpose16(v);
      bf16* tile = out + k0 * 32 + half * 512;
      for (int j = 0; j < 16; ++j) _mm512_storeu_si512(tile + j * 32, v[j]);
    }
  }
}

// 8 values of a row, the lanes outside m zero (nullptr: all zero).
NANOGPT_AVX512BF16 __m256 row_of_8(const float* p, __mmask8 m) {
  return p != nullptr ? _mm256_maskz_loadu_ps(m, p) : _mm256_setzero_ps();
}
NANOGPT_AVX512BF16 __m128i row_of_8(const bf16* p, __mmask8 m) {
  return p != nullptr ? _mm_maskz_loadu_epi16(m, p) : _mm_setzero_si128();
}

// a in lanes 0..7, b in 8..15 (AVX-512F's 64-bit insert: the 32-bit one needs DQ).
NANOGPT_AVX512BF16 __m512 halves(__m256 a, __m256 b) {
  return _mm512_castpd_ps(
      _mm512_insertf64x4(_mm512_castpd256_pd512(_mm256_castps_pd(a)), _mm256_castps_pd(b), 1));
}

// Two k pairs of 8 rows contiguous in i: lanes 0..7 the pairs (k, k + 1) of rows 0..7 and lanes
// 8..15 the pairs (k + 2, k + 3), from the rows of the source at those four k (nullptr: past
// k_valid, zero). m: the rows that are valid.
NANOGPT_AVX512BF16 __m512i load_two_pairs_of_8(const float* k0, const float* k1, const float* k2,
                                               const float* k3, __mmask8 m) {
  return rounded_pairs(halves(row_of_8(k0, m), row_of_8(k2, m)),
                       halves(row_of_8(k1, m), row_of_8(k3, m)));
}

NANOGPT_AVX512BF16 __m512i load_two_pairs_of_8(const bf16* k0, const bf16* k1, const bf16* k2,
                                               const bf16* k3, __mmask8 m) {
  return word_pairs(
      _mm256_inserti128_si256(_mm256_castsi128_si256(row_of_8(k0, m)), row_of_8(k2, m), 1),
      _mm256_inserti128_si256(_mm256_castsi128_si256(row_of_8(k1, m)), row_of_8(k3, m), 1));
}

// An 8-row VNNI micro-panel from rows contiguous in i, two k pairs (64 bytes of the panel) a
// store; the 16-lane loop of vnni_panel would fill half of each vector.
template <class T>
NANOGPT_AVX512BF16 void half_rows_panel_transposed(const T* src, int64_t ld, int64_t valid,
                                                   int64_t k_valid, int64_t kp, uint32_t* out) {
  const __mmask8 m = static_cast<__mmask8>(valid >= 8 ? 0xFF : (1u << valid) - 1);
  const auto row = [&](int64_t k) { return k < k_valid ? src + k * ld : nullptr; };
  int64_t k = 0;
  for (; k + 4 <= kp; k += 4) {
    _mm512_storeu_si512(out + k / 2 * 8,
                        load_two_pairs_of_8(row(k), row(k + 1), row(k + 2), row(k + 3), m));
  }
  if (k < kp) {  // one pair left (kp is even)
    const __m512i v = load_two_pairs_of_8(row(k), row(k + 1), nullptr, nullptr, m);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + k / 2 * 8), _mm512_castsi512_si256(v));
  }
}

// An 8-row VNNI micro-panel from rows contiguous in k, 64 values of k at a time: the rows' first
// 32 values and their next 32 as the 16 inputs of one transpose, whose column j then holds pair
// j in its low 8 lanes and pair 16 + j in its high 8 (the 16-row block of vnni_panel would
// transpose 8 rows of zeros).
template <class T>
NANOGPT_AVX512BF16 void half_rows_panel(const T* src, int64_t ld, int64_t valid, int64_t k_valid,
                                        int64_t kp, uint32_t* out) {
  for (int64_t k0 = 0; k0 < kp; k0 += 64) {
    __m512i v[16];
    for (int half = 0; half < 2; ++half) {
      const int64_t k = k0 + 32 * half, n = k_valid - k;
      for (int i = 0; i < 8; ++i) {
        v[8 * half + i] =
            i < valid && n > 0 ? load_pairs(src + i * ld + k, n) : _mm512_setzero_si512();
      }
    }
    transpose16(v);
    const int64_t pairs = (kp - k0) / 2;
    for (int64_t j = 0; j < 16 && j < pairs; ++j) {
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + (k0 / 2 + j) * 8),
                          _mm512_castsi512_si256(v[j]));
      if (16 + j < pairs) {
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + (k0 / 2 + 16 + j) * 8),
                            _mm512_extracti64x4_epi64(v[j], 1));
      }
    }
  }
}

// The 64-byte parts (k pairs (k, k + 1) and (k + 2, k + 3)) of the four 8-row panels of a line
// of 32 bf16 rows of Y, from the source rows at k .. k + 3. Per 128-bit lane L (panel L),
// unpacklo/unpackhi of (r0, r1) hold the pairs (k, k + 1) of its rows 0–3 and 4–7, and of
// (r2, r3) those of k + 2: a 4 × 4 transpose of 128-bit lanes puts each panel's four in one
// vector.
NANOGPT_AVX512BF16 void panels_of_line(__m512i r0, __m512i r1, __m512i r2, __m512i r3,
                                       __m512i out[4]) {
  const __m512i a = _mm512_unpacklo_epi16(r0, r1), b = _mm512_unpackhi_epi16(r0, r1);
  const __m512i c = _mm512_unpacklo_epi16(r2, r3), d = _mm512_unpackhi_epi16(r2, r3);
  const __m512i ab_low = _mm512_shuffle_i32x4(a, b, 0x44),
                ab_high = _mm512_shuffle_i32x4(a, b, 0xEE);
  const __m512i cd_low = _mm512_shuffle_i32x4(c, d, 0x44),
                cd_high = _mm512_shuffle_i32x4(c, d, 0xEE);
  out[0] = _mm512_shuffle_i32x4(ab_low, cd_low, 0x88);
  out[1] = _mm512_shuffle_i32x4(ab_low, cd_low, 0xDD);
  out[2] = _mm512_shuffle_i32x4(ab_high, cd_high, 0x88);
  out[3] = _mm512_shuffle_i32x4(ab_high, cd_high, 0xDD);
}

// The same for the two 8-row panels of a line of 16 fp32 rows (out[0], out[1]), rounded:
// rounded_pairs gives each panel's pairs in one half of the vector.
NANOGPT_AVX512BF16 void panels_of_line(__m512 r0, __m512 r1, __m512 r2, __m512 r3, __m512i out[4]) {
  const __m512i low = rounded_pairs(r0, r1), high = rounded_pairs(r2, r3);
  out[0] = _mm512_shuffle_i64x2(low, high, 0x44);
  out[1] = _mm512_shuffle_i64x2(low, high, 0xEE);
}

// Rows [0, rows) of a line of Y at one k (the rest zero); nullptr: past k_valid, all zero.
NANOGPT_AVX512BF16 __m512i line_row(const bf16* p, int64_t rows) {
  if (p == nullptr || rows <= 0) return _mm512_setzero_si512();
  const __mmask32 m = first_lanes32(rows);
  return _mm512_maskz_loadu_epi16(m, p);
}
NANOGPT_AVX512BF16 __m512 line_row(const float* p, int64_t rows) {
  return p == nullptr ? _mm512_setzero_ps() : _mm512_maskz_loadu_ps(first_lanes(rows), p);
}

// Runs of 8-row VNNI panels from rows contiguous in i, a 64-byte line of each source row (four
// panels of bf16, two of fp32) at a time, four k (two pairs: 64 bytes of each panel) a step.
// The same bits as half_rows_panel_transposed panel by panel: the same rounding, zeros past the
// valid rows and k_valid.
template <class T>
NANOGPT_TARGET_AVX512BF16 void vnni_panels_across(const void* src_v, int64_t ld, int64_t first,
                                                  int64_t valid, int64_t k_valid, int64_t kp,
                                                  int64_t panels, void* out_v,
                                                  int64_t panel_bytes) {
  constexpr int64_t kLine = 64 / static_cast<int64_t>(sizeof(T));
  constexpr int64_t kPanels = kLine / kVnniMr;
  const T* src = static_cast<const T*>(src_v) + first;
  char* out = static_cast<char*>(out_v);
  for (int64_t g = 0; g < panels; g += kPanels) {
    const int64_t rows = valid - g * kVnniMr, count = std::min(kPanels, panels - g);
    const T* line = rows > 0 ? src + g * kVnniMr : nullptr;
    for (int64_t k = 0; k < kp; k += 4) {
      const T* at[4];
      for (int64_t j = 0; j < 4; ++j) {
        at[j] = line != nullptr && k + j < k_valid ? line + (k + j) * ld : nullptr;
      }
      __m512i part[4];
      panels_of_line(line_row(at[0], rows), line_row(at[1], rows), line_row(at[2], rows),
                     line_row(at[3], rows), part);
      // kp is even: the last step may hold one pair (32 bytes).
      const bool two_pairs = k + 4 <= kp;
      for (int64_t p = 0; p < count; ++p) {
        char* dst = out + (g + p) * panel_bytes + k / 2 * kVnniMr * 4;
        if (two_pairs) {
          _mm512_storeu_si512(dst, part[p]);
        } else {
          _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst), _mm512_castsi512_si256(part[p]));
        }
      }
    }
  }
}

// A 32-row VNNI micro-panel (a B panel of 32 columns) from bf16 rows contiguous in i, one k pair
// a step: its two source rows are one 64-byte line each, and per 128-bit lane L
// unpacklo/unpackhi interleave them into the pairs of rows 8L..8L+3 and 8L+4..8L+7, which two
// permutes put in order: 8 instructions a k pair where load_block's 16-lane pairs take 14. It
// packs a weight gradient's bf16 activations, and attention's Q and K as the right side of dK
// and dQ, at every call.
NANOGPT_AVX512BF16 void line_pairs_panel(const bf16* src, int64_t ld, int64_t valid,
                                         int64_t k_valid, int64_t kp, uint32_t* out) {
  const __mmask32 m = first_lanes32(valid);
  const __m512i first_half = _mm512_setr_epi64(0, 1, 8, 9, 2, 3, 10, 11);
  const __m512i second_half = _mm512_setr_epi64(4, 5, 12, 13, 6, 7, 14, 15);
  for (int64_t k = 0; k < kp; k += 2) {
    // Rows past k_valid read nothing (a zero mask).
    const __m512i r0 =
        _mm512_maskz_loadu_epi16(k < k_valid ? m : 0, src + (k < k_valid ? k : 0) * ld);
    const __m512i r1 =
        _mm512_maskz_loadu_epi16(k + 1 < k_valid ? m : 0, src + (k + 1 < k_valid ? k + 1 : 0) * ld);
    const __m512i lo = _mm512_unpacklo_epi16(r0, r1), hi = _mm512_unpackhi_epi16(r0, r1);
    _mm512_storeu_si512(out + k / 2 * 32, _mm512_permutex2var_epi64(lo, first_half, hi));
    _mm512_storeu_si512(out + k / 2 * 32 + 16, _mm512_permutex2var_epi64(lo, second_half, hi));
  }
}

// One VNNI micro-panel of p rows of Y (layout::vnni_a with mr = p, or vnni_b seen transposed
// with nr = p): per k pair, the p pairs of its rows, contiguous.
template <class T, int kP>
NANOGPT_TARGET_AVX512BF16 void vnni_panel(const void* src_v, int64_t ld, Trans trans, int64_t first,
                                          int64_t valid, int64_t k_valid, int64_t kp, void* out_v) {
  const T* src = static_cast<const T*>(src_v) + (trans == Trans::kNo ? first * ld : first);
  uint32_t* out = static_cast<uint32_t*>(out_v);  // one pair per element
  if constexpr (kP == 8) {
    if (trans == Trans::kNo) {
      half_rows_panel(src, ld, valid, k_valid, kp, out);
    } else {
      half_rows_panel_transposed(src, ld, valid, k_valid, kp, out);
    }
    return;
  }
  if constexpr (kP == 32 && std::is_same_v<T, bf16>) {
    if (trans == Trans::kYes) {
      line_pairs_panel(src, ld, valid, k_valid, kp, out);
      return;
    }
  }
  for (int64_t k0 = 0; k0 < kp; k0 += 32) {
    const int64_t pairs = (kp - k0) / 2 < 16 ? (kp - k0) / 2 : 16;
    for (int64_t i0 = 0; i0 < kP; i0 += 16) {
      const int64_t width = kP - i0 < 16 ? kP - i0 : 16;
      const __mmask16 m = first_lanes(width);
      __m512i v[16];
      if (!load_block(src, ld, trans, i0, clamp16(valid - i0), k0, k_valid, v)) transpose16(v);
      for (int64_t kk = 0; kk < pairs; ++kk) {
        _mm512_mask_storeu_epi32(out + (k0 / 2 + kk) * kP + i0, m, v[kk]);
      }
    }
  }
}

// 16 values of Y as fp32 lanes, converted as the source says (lanes outside m are +0).
template <PackSource kSource>
NANOGPT_AVX512BW __m512 load_f32(const float* p, __mmask16 m) {
  if constexpr (kSource == PackSource::kF32ToBf16) {
    const __m512i hi = bf16_round_hi(_mm512_castps_si512(_mm512_maskz_loadu_ps(m, p)));
    return _mm512_castsi512_ps(
        _mm512_and_si512(hi, _mm512_set1_epi32(static_cast<int>(0xFFFF0000u))));
  } else {
    return _mm512_maskz_loadu_ps(m, p);
  }
}
template <PackSource>
NANOGPT_AVX512BW __m512 load_f32(const bf16* p, __mmask16 m) {
  return _mm512_castsi512_ps(bf16_load_hi(p, m));
}

// One fp32 micro-panel of kP rows of Y (layout::fp32_a with mr = kP, or fp32_b seen transposed
// with nr = kP): out[k·kP + i]. A source contiguous in i is copied a k at a time; one contiguous
// in k is read in 16×16 blocks and transposed in registers, where the portable packer scatters
// one float at a time with stride kP.
template <class T, PackSource kSource, int kP>
NANOGPT_TARGET_AVX512BW void fp32_panel_avx512(const void* src_v, int64_t ld, Trans trans,
                                               int64_t first, int64_t valid, int64_t k_valid,
                                               int64_t kp, void* out_v) {
  const T* src = static_cast<const T*>(src_v) + (trans == Trans::kNo ? first * ld : first);
  float* out = static_cast<float*>(out_v);
  if (trans == Trans::kYes) {
    for (int64_t k = 0; k < k_valid; ++k) {
      for (int i0 = 0; i0 < kP; i0 += 16) {
        const __mmask16 store = first_lanes(kP - i0);
        const __m512 v = load_f32<kSource>(src + k * ld + i0, first_lanes(valid - i0));
        _mm512_mask_storeu_ps(out + k * kP + i0, store, v);
      }
    }
  } else {
    for (int64_t k0 = 0; k0 < k_valid; k0 += 16) {
      const __mmask16 km = first_lanes(k_valid - k0);
      const int64_t kn = k_valid - k0 < 16 ? k_valid - k0 : 16;
      for (int i0 = 0; i0 < kP; i0 += 16) {
        __m512i v[16];
        for (int i = 0; i < 16; ++i) {
          v[i] = i0 + i < valid && i0 + i < kP
                     ? _mm512_castps_si512(load_f32<kSource>(src + (i0 + i) * ld + k0, km))
                     : _mm512_setzero_si512();
        }
        transpose16(v);  // v[j] now holds k0 + j for rows i0 .. i0 + 15
        const __mmask16 store = first_lanes(kP - i0);
        for (int64_t j = 0; j < kn; ++j) {
          _mm512_mask_storeu_ps(out + (k0 + j) * kP + i0, store, _mm512_castsi512_ps(v[j]));
        }
      }
    }
  }
  for (int64_t k = k_valid; k < kp; ++k) {
    for (int i0 = 0; i0 < kP; i0 += 16) {
      _mm512_mask_storeu_ps(out + k * kP + i0, first_lanes(kP - i0), _mm512_setzero_ps());
    }
  }
}

#undef NANOGPT_AVX512BW
#undef NANOGPT_AVX512BF16

}  // namespace

void amx_pack_a_f32(const void* src, int64_t ld, Trans t, int64_t first, int64_t valid,
                    int64_t k_valid, int64_t kp, void* out) {
  amx_panel<float, false>(src, ld, t, first, valid, k_valid, kp, out);
}
void amx_pack_a_bf16(const void* src, int64_t ld, Trans t, int64_t first, int64_t valid,
                     int64_t k_valid, int64_t kp, void* out) {
  amx_panel<bf16, false>(src, ld, t, first, valid, k_valid, kp, out);
}
void amx_pack_b_f32(const void* src, int64_t ld, Trans t, int64_t first, int64_t valid,
                    int64_t k_valid, int64_t kp, void* out) {
  amx_panel<float, true>(src, ld, t, first, valid, k_valid, kp, out);
}
void amx_pack_b_bf16(const void* src, int64_t ld, Trans t, int64_t first, int64_t valid,
                     int64_t k_valid, int64_t kp, void* out) {
  amx_panel<bf16, true>(src, ld, t, first, valid, k_valid, kp, out);
}

void vnni_pack_a_across_f32(const void* src, int64_t ld, int64_t first, int64_t valid,
                            int64_t k_valid, int64_t kp, int64_t panels, void* out,
                            int64_t panel_bytes) {
  vnni_panels_across<float>(src, ld, first, valid, k_valid, kp, panels, out, panel_bytes);
}
void vnni_pack_a_across_bf16(const void* src, int64_t ld, int64_t first, int64_t valid,
                             int64_t k_valid, int64_t kp, int64_t panels, void* out,
                             int64_t panel_bytes) {
  vnni_panels_across<bf16>(src, ld, first, valid, k_valid, kp, panels, out, panel_bytes);
}

void vnni_pack_a_f32(const void* src, int64_t ld, Trans t, int64_t first, int64_t valid,
                     int64_t k_valid, int64_t kp, void* out) {
  vnni_panel<float, kVnniMr>(src, ld, t, first, valid, k_valid, kp, out);
}
void vnni_pack_a_bf16(const void* src, int64_t ld, Trans t, int64_t first, int64_t valid,
                      int64_t k_valid, int64_t kp, void* out) {
  vnni_panel<bf16, kVnniMr>(src, ld, t, first, valid, k_valid, kp, out);
}
void vnni_pack_b_f32(const void* src, int64_t ld, Trans t, int64_t first, int64_t valid,
                     int64_t k_valid, int64_t kp, void* out) {
  vnni_panel<float, kVnniNr>(src, ld, t, first, valid, k_valid, kp, out);
}
void vnni_pack_b_bf16(const void* src, int64_t ld, Trans t, int64_t first, int64_t valid,
                      int64_t k_valid, int64_t kp, void* out) {
  vnni_panel<bf16, kVnniNr>(src, ld, t, first, valid, k_valid, kp, out);
}

template <int kP>
PackTable fp32_pack_table_avx512() {
  if (!cpu_info().avx512bw || !cpu_info().avx512vl) return fp32_pack_table<kP>();
  return {fp32_panel_avx512<float, PackSource::kF32, kP>,
          fp32_panel_avx512<float, PackSource::kF32ToBf16, kP>,
          fp32_panel_avx512<bf16, PackSource::kBf16, kP>};
}
template PackTable fp32_pack_table_avx512<8>();
template PackTable fp32_pack_table_avx512<32>();

}  // namespace nanogpt::pack
