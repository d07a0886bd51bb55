// The attention forward of a single query: decoding one token over a K/V cache. The tile path
// (attention_forward.cpp) packs every visible key and value of the cache into the micro-kernel's
// layout and multiplies a query tile padded from one row to the kernel's height, per call; for
// one query that packing and padding is most of the work (a batched decode makes one such call
// per sequence per layer). Here the query meets the keys directly: the same arithmetic as the
// tile path, tile of keys by tile of keys in the same order — operands rounded to bf16 as the
// packers round them (q, k, v, and P before it meets V), fp32 sums, the online softmax of
// online_softmax_tile (a running max, p = exp_approx(scale·s − m), l and the output rescaled
// by exp_approx(m_old − m_new) when the max grows) — only the order of each dot product's fp32
// sum differs from the micro-kernel's. So a decoded row stays within fp32 rounding of the tile
// path's (tests/test_attention.cpp, OneQueryPathMatchesTheTilePathAndTheReference), which the
// decoder's bounds against a full forward already allow for (tests/test_decoder.cpp).
#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/attention_internal.hpp"
#include "kernels/attention_mask.hpp"
#include "kernels/attention_shape.hpp"
#include "kernels/attention_tile_math.hpp"
#include "kernels/bf16.hpp"
#include "kernels/exp_approx.hpp"
#include "kernels/target.hpp"
#include "runtime/error.hpp"

namespace nanogpt {

namespace {

// b's element as the packers hand it to the kernel: rounded to bf16 in bf16 (kernels/bf16.hpp's
// rounding, branch-free, so the loops below still vectorize).
template <bool kBf16>
inline float operand(float x) {
  if constexpr (kBf16) {
    return round_to_bf16(x);
  } else {
    return x;
  }
}

// Σ a[e]·b[e] in 16 lanes, then the lanes in order: a fixed order, so the same inputs give the
// same bits, and one the compiler vectorizes. a is already an operand, b is rounded here.
template <bool kBf16>
inline float dot_body(const float* a, const float* b, int64_t n) {
  float lane[16] = {};
  int64_t e = 0;
  for (; e + 16 <= n; e += 16) {
    for (int l = 0; l < 16; ++l) lane[l] += a[e + l] * operand<kBf16>(b[e + l]);
  }
  for (int l = 0; e + l < n; ++l) lane[l] += a[e + l] * operand<kBf16>(b[e + l]);
  float sum = 0.0f;
  for (float x : lane) sum += x;
  return sum;
}
NANOGPT_TARGET_CLONES float dot_fp32(const float* a, const float* b, int64_t n) {
  return dot_body<false>(a, b, n);
}
NANOGPT_TARGET_CLONES float dot_bf16(const float* a, const float* b, int64_t n) {
  return dot_body<true>(a, b, n);
}

// o[e] = o[e]·alpha + p·v[e], v rounded here.
template <bool kBf16>
inline void scale_add_body(float* o, float alpha, float p, const float* v, int64_t n) {
  for (int64_t e = 0; e < n; ++e) o[e] = o[e] * alpha + p * operand<kBf16>(v[e]);
}
NANOGPT_TARGET_CLONES void scale_add_fp32(float* o, float alpha, float p, const float* v,
                                          int64_t n) {
  scale_add_body<false>(o, alpha, p, v, n);
}
NANOGPT_TARGET_CLONES void scale_add_bf16(float* o, float alpha, float p, const float* v,
                                          int64_t n) {
  scale_add_body<true>(o, alpha, p, v, n);
}

}  // namespace

void attention_forward_one_query(const AttentionParams& p, float* out, float* lse,
                                 bf16* out_rounded) {
  validate_tensors(p, "attention_forward");
  const Shape sh = shape_of(p);
  if (sh.T != 1) {
    throw InputError("attention_forward_one_query: " + std::to_string(sh.T) +
                     " queries; this path takes exactly one");
  }
  const AttentionMask mask(p);
  const int64_t D = sh.D, i = sh.T_kv - 1;
  const int64_t first = mask.first_visible(i);
  const bool bf16 = p.precision == Precision::kBf16;
  // Operands as the packers would hand them to the kernel: rounded to bf16 in bf16.
  const auto dot = bf16 ? dot_bf16 : dot_fp32;
  const auto scale_add = bf16 ? scale_add_bf16 : scale_add_fp32;
  // The call's scratch, freed on return: the query's operand and output (D each) and a tile's
  // scores.
  std::vector<float> scratch(static_cast<size_t>(2 * D + kBk));
  float* const q = scratch.data();
  float* const o = q + D;
  float* const s = o + D;
  for (int64_t h = 0; h < sh.H; ++h) {
    const int64_t kv = sh.kv_head(h);
    for (int64_t e = 0; e < D; ++e) q[e] = bf16 ? round_to_bf16(p.q[h * D + e]) : p.q[h * D + e];
    std::fill(o, o + D, 0.0f);
    float m = kNegInf, l = 0.0f;
    for (int64_t k0 = first / kBk * kBk; k0 <= i; k0 += kBk) {
      // The tile's visible keys: [max(k0, first), min(k0 + kBk, i + 1)).
      const int64_t j0 = std::max(k0, first), j1 = std::min(k0 + kBk, i + 1);
      float mx = kNegInf;
      for (int64_t j = j0; j < j1; ++j) {
        const float x = p.scale * dot(q, p.k + j * sh.ld_kv + kv * D, D);
        s[j - j0] = x;
        mx = x > mx ? x : mx;
      }
      const float m_new = mx > m ? mx : m;
      const float alpha = mx == kNegInf ? 1.0f : exp_approx(m - m_new);  // 0 on the first tile
      float sum = 0.0f;
      for (int64_t j = j0; j < j1; ++j) {
        const float e = exp_approx(s[j - j0] - m_new);
        sum += e;
        // The first key of the tile applies the rescaling; the rest add.
        scale_add(o, j == j0 ? alpha : 1.0f, bf16 ? round_to_bf16(e) : e,
                  p.v + j * sh.ld_kv + kv * D, D);
      }
      l = l * alpha + sum;
      m = m_new;
    }
    const float inv = 1.0f / l;
    for (int64_t e = 0; e < D; ++e) o[e] *= inv;
    if (out != nullptr) std::copy(o, o + D, out + h * D);
    if (out_rounded != nullptr) round_to_bf16(o, D, out_rounded + h * D);
    lse[h] = m + std::log(l);
  }
}

}  // namespace nanogpt
