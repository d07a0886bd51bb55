// Portable packers: the fp32 micro-panels, and a packer generated from any separable layout
// (the reference the vectorised AMX and VNNI packers are tested to match byte for byte). Both
// convert as they copy, so rounding to bf16 costs no pass of its own. The AMX and VNNI packers
// are AVX-512 code in pack_avx512.cpp.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/bf16.hpp"
#include "kernels/gemm/microkernel.hpp"

namespace nanogpt::pack {

inline float convert_to_f32(float x, PackSource s) {
  return s == PackSource::kF32ToBf16 ? round_to_bf16(x) : x;
}
inline float convert_to_f32(bf16 x, PackSource) {
  return to_float(x);
}
inline bf16 convert_to_bf16(float x) {
  return to_bf16(x);
}
inline bf16 convert_to_bf16(bf16 x) {
  return x;
}

// fp32 micro-panel of p rows of Y (fp32_a, or fp32_b seen transposed): out[k·p + i].
template <class T, PackSource kSource>
void fp32_panel(const void* src_v, int64_t ld, Trans trans, int64_t first, int64_t valid,
                int64_t k_valid, int64_t kp, int64_t p, float* out) {
  const T* src = static_cast<const T*>(src_v);
  if (trans == Trans::kYes) {
    // The p values of one k are contiguous in the source.
    for (int64_t k = 0; k < k_valid; ++k) {
      const T* row = src + k * ld + first;
      float* o = out + k * p;
      for (int64_t i = 0; i < valid; ++i) o[i] = convert_to_f32(row[i], kSource);
      for (int64_t i = valid; i < p; ++i) o[i] = 0.0f;
    }
  } else {
    // Each row is contiguous in k: read it once and scatter with stride p.
    for (int64_t i = 0; i < valid; ++i) {
      const T* row = src + (first + i) * ld;
      for (int64_t k = 0; k < k_valid; ++k) out[k * p + i] = convert_to_f32(row[k], kSource);
    }
    for (int64_t i = valid; i < p; ++i) {
      for (int64_t k = 0; k < k_valid; ++k) out[k * p + i] = 0.0f;
    }
  }
  for (int64_t k = k_valid; k < kp; ++k) {
    for (int64_t i = 0; i < p; ++i) out[k * p + i] = 0.0f;
  }
}

template <class T, PackSource kSource, int64_t kP>
void fp32_panel_fn(const void* src, int64_t ld, Trans trans, int64_t first, int64_t valid,
                   int64_t k_valid, int64_t kp, void* out) {
  fp32_panel<T, kSource>(src, ld, trans, first, valid, k_valid, kp, kP, static_cast<float*>(out));
}

// The default packers of an fp32 kernel, for A with kP = mr or B with kP = nr: fp32 panels from
// every source (fp32, fp32 rounded to bf16, bf16).
template <int64_t kP>
constexpr PackTable fp32_pack_table() {
  return {fp32_panel_fn<float, PackSource::kF32, kP>,
          fp32_panel_fn<float, PackSource::kF32ToBf16, kP>,
          fp32_panel_fn<bf16, PackSource::kBf16, kP>};
}

// The same packers vectorised with AVX-512 F, BW and VL, byte for byte the same output
// (pack_avx512.cpp; kP = 8 and 32 are instantiated); fp32_pack_table<kP>() where the CPU lacks
// BW or VL.
template <int kP>
PackTable fp32_pack_table_avx512();

// Any separable layout of a p×kp micro-panel (rows of Y by k), as bf16: out[layout(i, k)].
// The offsets are tabulated once per call, in tables of the call's own (this is the tests'
// reference, on no hot path), so the layout is evaluated O(p + kp) times.
template <class T>
void bf16_panel_by_layout(const layout::Layout& panel, const T* src, int64_t ld, Trans trans,
                          int64_t first, int64_t valid, int64_t k_valid, bf16* out) {
  const int64_t p = panel.rows(), kp = panel.cols();
  std::vector<int64_t> row_off(static_cast<size_t>(p)), col_off(static_cast<size_t>(kp));
  for (int64_t i = 0; i < p; ++i) row_off[i] = panel.row_part(i);
  for (int64_t k = 0; k < kp; ++k) col_off[k] = panel.col_part(k);
  const bf16 zero{0};
  if (trans == Trans::kYes) {
    for (int64_t k = 0; k < k_valid; ++k) {
      const T* row = src + k * ld + first;
      for (int64_t i = 0; i < valid; ++i) out[row_off[i] + col_off[k]] = convert_to_bf16(row[i]);
    }
  } else {
    for (int64_t i = 0; i < valid; ++i) {
      const T* row = src + (first + i) * ld;
      for (int64_t k = 0; k < k_valid; ++k) out[row_off[i] + col_off[k]] = convert_to_bf16(row[k]);
    }
  }
  for (int64_t i = valid; i < p; ++i) {
    for (int64_t k = 0; k < kp; ++k) out[row_off[i] + col_off[k]] = zero;
  }
  for (int64_t i = 0; i < valid; ++i) {
    for (int64_t k = k_valid; k < kp; ++k) out[row_off[i] + col_off[k]] = zero;
  }
}

// The AMX panel packers (pack_avx512.cpp): A micro-panels of 32 rows, B micro-panels of 32
// columns, from fp32 (rounded) or bf16 sources.
void amx_pack_a_f32(const void*, int64_t, Trans, int64_t, int64_t, int64_t, int64_t, void*);
void amx_pack_a_bf16(const void*, int64_t, Trans, int64_t, int64_t, int64_t, int64_t, void*);
void amx_pack_b_f32(const void*, int64_t, Trans, int64_t, int64_t, int64_t, int64_t, void*);
void amx_pack_b_bf16(const void*, int64_t, Trans, int64_t, int64_t, int64_t, int64_t, void*);

// The AVX512-BF16 kernel's VNNI packers (pack_avx512.cpp, the same building blocks): A
// micro-panels of kVnniMr rows, B micro-panels of kVnniNr columns.
constexpr int kVnniMr = 8, kVnniNr = 32;
void vnni_pack_a_f32(const void*, int64_t, Trans, int64_t, int64_t, int64_t, int64_t, void*);
void vnni_pack_a_bf16(const void*, int64_t, Trans, int64_t, int64_t, int64_t, int64_t, void*);
void vnni_pack_b_f32(const void*, int64_t, Trans, int64_t, int64_t, int64_t, int64_t, void*);
void vnni_pack_b_bf16(const void*, int64_t, Trans, int64_t, int64_t, int64_t, int64_t, void*);
// Runs of A micro-panels from sources contiguous in i (MicroKernel::pack_a_across): four panels
// of a 64-byte line of bf16, two of fp32.
void vnni_pack_a_across_f32(const void*, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t,
                            void*, int64_t);
void vnni_pack_a_across_bf16(const void*, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t,
                             void*, int64_t);

}  // namespace nanogpt::pack
