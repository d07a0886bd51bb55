#include "kernels/attention.hpp"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <limits>
#include <memory>
#include <new>
#include <string>
#include <vector>

#include <immintrin.h>

#include "kernels/attention_internal.hpp"
#include "kernels/bf16.hpp"
#include "kernels/exp_approx.hpp"
#include "kernels/gemm/bf16_avx512.hpp"
#include "kernels/gemm/microkernel.hpp"
#include "runtime/aligned_memory.hpp"
#include "runtime/cpu_info.hpp"
#include "runtime/error.hpp"
#include "runtime/integer_math.hpp"
#include "runtime/thread_pool.hpp"

namespace nanogpt {

namespace {

// Tiles of kBq queries × kBk keys. 64 divides the speedrun's 128-token mask blocks, so a tile
// never straddles a block boundary and most tiles are either fully visible or skipped; other
// block sizes still work, they just take the elementwise-mask path more often. 64 is also a
// multiple of every micro-kernel's nr (8 to 32) and of the k step (1, 2 or 32), so key tiles
// need no padding as columns or as k; rows are padded to the kernel's mr (6 and 12 do not
// divide 64).
constexpr int64_t kBq = 64;
constexpr int64_t kBk = 64;
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// ---------------------------------------------------------------------------------------------
// Elementwise work on score rows.

// A forward score tile, transposed: s[j·kBq + q] is the raw score of query q and key j, for
// keys j < nk, and query q sees keys [lo[q], hi[q]) (all nk when `full`). Runs the online
// softmax over it: leaves p = exp(scale·s − m_new) there (0 where hidden), updates each
// query's running max m and sum l, and sets alpha[q], the factor its output row must be scaled
// by. With queries along the vector lanes, the max and the sum are plain lane-wise updates in
// key order, so there are no horizontal reductions and the rounding of a sum depends on the
// tile alone; masking by range rather than by writing -inf first saves a pass.
__attribute__((target_clones("avx512f", "arch=haswell", "default"))) void online_softmax_tile(
    float* s, int64_t nk, const int32_t* lo, const int32_t* hi, bool full, float scale, float* m,
    float* l, float* alpha) {
  float mx[kBq], m_new[kBq], sum[kBq];
  for (int64_t q = 0; q < kBq; ++q) mx[q] = kNegInf;
  for (int32_t j = 0; j < static_cast<int32_t>(nk); ++j) {
    const float* row = s + j * kBq;
    for (int64_t q = 0; q < kBq; ++q) {
      const float x = scale * row[q];
      const bool in = full || (j >= lo[q] && j < hi[q]);
      mx[q] = in && x > mx[q] ? x : mx[q];
    }
  }
  for (int64_t q = 0; q < kBq; ++q) {
    m_new[q] = mx[q] > m[q] ? mx[q] : m[q];
    // Nothing visible yet leaves m at -inf, and -inf − -inf would be NaN.
    alpha[q] = mx[q] == kNegInf ? 1.0f : exp_approx(m[q] - m_new[q]);  // 0 on the first visit
    sum[q] = 0.0f;
  }
  for (int32_t j = 0; j < static_cast<int32_t>(nk); ++j) {
    float* row = s + j * kBq;
    for (int64_t q = 0; q < kBq; ++q) {
      const bool in = full || (j >= lo[q] && j < hi[q]);
      const float e = in ? exp_approx(scale * row[q] - m_new[q]) : 0.0f;
      row[q] = e;
      sum[q] += e;
    }
  }
  for (int64_t q = 0; q < kBq; ++q) {
    l[q] = l[q] * alpha[q] + sum[q];
    m[q] = m_new[q];
  }
}

// A backward tile, s[i·kBk + j] for query i < nq and key j (the row holds kBk keys, those of
// the tile and padding the products ignore): s holds raw scores and dp holds dP = dO·Vᵀ.
// Leaves P (0 outside [lo[i], hi[i])) in s and dS = scale·P∘(dP − Delta) in dp.
__attribute__((target_clones("avx512f", "arch=haswell", "default"))) void probs_and_grads_tile(
    float* s, float* dp, int64_t nq, const int32_t* lo, const int32_t* hi, float scale,
    const float* lse, const float* delta) {
  for (int64_t i = 0; i < nq; ++i) {
    const int32_t a = lo[i], b = hi[i];
    const float shift = lse[i], d = delta[i];
    float* si = s + i * kBk;
    float* dpi = dp + i * kBk;
    for (int32_t j = 0; j < static_cast<int32_t>(kBk); ++j) {
      const bool in = j >= a && j < b;
      const float pij = in ? exp_approx(scale * si[j] - shift) : 0.0f;
      si[j] = pij;
      dpi[j] = scale * pij * (dpi[j] - d);
    }
  }
}

// dst = src rounded to bf16 exactly as the packers round (kernels/bf16.hpp: nearest even,
// denormals flushed to a zero of their sign), as fp32. In bf16, dP is computed from dO as the
// packers round it, and Delta must be the same dO's product for each row of dS to sum to zero
// as it should (it halves the error of dq and dk).
// GCC 12's AVX-512 intrinsics start from self-initialised "undefined" vectors, which
// -Wmaybe-uninitialized reports once they are inlined into target("avx512f") functions.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
__attribute__((target("avx512f"))) void round_row_to_bf16_avx512(const float* src, int64_t n,
                                                                 float* dst) {
  const __m512i high_half = _mm512_set1_epi32(static_cast<int>(0xFFFF0000u));
  for (int64_t e = 0; e < n; e += 16) {
    const __mmask16 m =
        n - e >= 16 ? static_cast<__mmask16>(0xFFFF) : static_cast<__mmask16>((1u << (n - e)) - 1);
    const __m512i hi = bf16_round_hi(_mm512_castps_si512(_mm512_maskz_loadu_ps(m, src + e)));
    _mm512_mask_storeu_ps(dst + e, m, _mm512_castsi512_ps(_mm512_and_si512(hi, high_half)));
  }
}
#pragma GCC diagnostic pop

void round_row_to_bf16(const float* src, int64_t n, float* dst) {
  if (cpu_info().avx512f) {
    round_row_to_bf16_avx512(src, n, dst);
    return;
  }
  for (int64_t e = 0; e < n; ++e) dst[e] = round_to_bf16(src[e]);
}

// Σ a·b in double, rounded once: Delta = dO·O is subtracted from every dP of its row, so its
// error would land on every dS. Fixed lanes keep the order (and the result) independent of ISA
// choices the compiler makes, while still vectorizing.
using f32x8 = float __attribute__((vector_size(32)));
using f64x8 = double __attribute__((vector_size(64)));

__attribute__((target_clones("avx512f", "arch=haswell", "default"))) float dot_double(
    const float* a, const float* b, int64_t n) {
  constexpr int64_t kLanes = 8;
  // Vector types spell out the lane-wise sum; GCC does not vectorize it from scalar loops.
  f64x8 lanes = {};
  int64_t e = 0;
  for (; e + kLanes <= n; e += kLanes) {
    f32x8 x, y;
    std::memcpy(&x, a + e, sizeof x);
    std::memcpy(&y, b + e, sizeof y);
    lanes += __builtin_convertvector(x, f64x8) * __builtin_convertvector(y, f64x8);
  }
  for (; e < n; ++e) lanes[0] += static_cast<double>(a[e]) * b[e];
  double sum = 0;
  for (int64_t c = 0; c < kLanes; ++c) sum += lanes[c];
  return static_cast<float>(sum);
}

// Row i of o[rows × n] *= alpha[i], skipping the rows whose max did not grow.
__attribute__((target_clones("avx512f", "arch=haswell", "default"))) void scale_rows(
    float* o, int64_t rows, int64_t n, const float* alpha) {
  for (int64_t i = 0; i < rows; ++i) {
    if (alpha[i] == 1.0f) continue;
    for (int64_t e = 0; e < n; ++e) o[i * n + e] *= alpha[i];
  }
}

// ---------------------------------------------------------------------------------------------
// Shapes, tile geometry and masking.

// The parameters with their defaults resolved.
struct Shape {
  int64_t T, T_kv, H, H_kv, D, ld_q, ld_kv;
  int64_t offset;     // position of query 0: T_kv − T
  int64_t per_group;  // query heads per key/value head, H / H_kv
  int64_t kv_head(int64_t h) const { return h / per_group; }
};

Shape shape_of(const AttentionParams& p) {
  Shape s{};
  s.T = p.T;
  s.T_kv = p.T_kv == 0 ? p.T : p.T_kv;
  s.H = p.H;
  s.H_kv = p.H_kv == 0 ? p.H : p.H_kv;
  s.D = p.D;
  s.ld_q = p.ld_q == 0 ? p.ld : p.ld_q;
  s.ld_kv = p.ld_kv == 0 ? p.ld : p.ld_kv;
  s.offset = s.T_kv - s.T;
  s.per_group = s.H_kv > 0 ? s.H / s.H_kv : 1;
  return s;
}

void validate(const AttentionParams& p, const char* who) {
  const Shape s = shape_of(p);
  auto fail = [&](const std::string& why) {
    throw InputError(std::string(who) + ": " + why + " (T=" + std::to_string(p.T) +
                     ", T_kv=" + std::to_string(p.T_kv) + ", H=" + std::to_string(p.H) +
                     ", H_kv=" + std::to_string(p.H_kv) + ", D=" + std::to_string(p.D) +
                     ", ld=" + std::to_string(p.ld) + ", ld_q=" + std::to_string(p.ld_q) +
                     ", ld_kv=" + std::to_string(p.ld_kv) +
                     ", window_blocks=" + std::to_string(p.window_blocks) +
                     ", block_size=" + std::to_string(p.block_size) + ")");
  };
  if (p.T < 0 || p.H < 1 || p.D < 1) fail("need T >= 0, H >= 1 and D >= 1");
  if (p.T_kv < 0 || (p.T_kv > 0 && p.T_kv < p.T)) {
    fail(
        "T_kv must be 0 (meaning T) or at least T: the queries are the last T of the T_kv "
        "positions");
  }
  if (p.H_kv < 0 || s.H % s.H_kv != 0) {
    fail(
        "H_kv must be 0 (meaning H) or divide H: each key/value head serves H / H_kv query "
        "heads");
  }
  if (s.ld_q < s.H * s.D) fail("ld_q (or ld when ld_q is 0) must be at least H·D");
  if (s.ld_kv < s.H_kv * s.D) fail("ld_kv (or ld when ld_kv is 0) must be at least H_kv·D");
  if (p.window_blocks < 1 || p.block_size < 1) fail("window_blocks and block_size must be >= 1");
  if (s.T_kv > 0 && p.doc == nullptr) fail("doc is null");
  for (int64_t t = 1; t < s.T_kv; ++t) {
    if (p.doc[t] < p.doc[t - 1]) {
      fail("doc ids must be nondecreasing, but doc[" + std::to_string(t) +
           "] = " + std::to_string(p.doc[t]) + " < doc[" + std::to_string(t - 1) +
           "] = " + std::to_string(p.doc[t - 1]));
    }
  }
}

void validate_tensors(const AttentionParams& p, const char* who) {
  validate(p, who);
  if (p.T > 0 && (p.q == nullptr || p.k == nullptr || p.v == nullptr)) {
    throw InputError(std::string(who) + ": q, k and v must all be set");
  }
}

// The backward's extra condition: it differentiates a training step, where every position is
// a query.
void validate_backward(const AttentionParams& p, const char* who) {
  validate_tensors(p, who);
  if (p.T_kv != 0 && p.T_kv != p.T) {
    throw InputError(std::string(who) + ": the backward needs T_kv == T (or 0), got T=" +
                     std::to_string(p.T) + ", T_kv=" + std::to_string(p.T_kv) +
                     "; queries over a K/V cache (T_kv > T) are for decoding, forward only");
  }
}

// Window in blocks, capped so (block + W)·block_size cannot overflow; beyond T_kv/block_size + 1
// every W means "no window".
int64_t effective_window(const AttentionParams& p) {
  return std::min(p.window_blocks, shape_of(p).T_kv / p.block_size + 2);
}

// The mask pair by pair, as the spec states it, for the positions i of a query and j of a key;
// the references use it.
bool visible(const AttentionParams& p, int64_t i, int64_t j) {
  return j <= i && p.doc[i] == p.doc[j] &&
         i / p.block_size - j / p.block_size < effective_window(p);
}

// Docs are nondecreasing, so the keys the query at position i sees are one contiguous range
// [first, i]: first is the later of the start of its doc and the start of its window. The
// kernels mask by this.
int64_t first_visible(const AttentionParams& p, int64_t i) {
  const int64_t doc_start = std::lower_bound(p.doc, p.doc + i, p.doc[i]) - p.doc;
  const int64_t window_start = (i / p.block_size - effective_window(p) + 1) * p.block_size;
  return std::max(doc_start, window_start);
}

// A tile: queries [q0, q0+nq) (by index; positions offset + q0 on), keys [k0, k0+nk).
struct Tile {
  int64_t q0, nq, k0, nk;
};

enum class TileMask { kSkip, kFull, kPartial };

// Docs are nondecreasing, so the corner tokens decide: if the last key is in an earlier doc than
// the first query, no key's doc matches any query's; if the first key and last query share a
// doc, every token in between does too.
TileMask classify(const AttentionParams& p, int64_t offset, const Tile& t) {
  const int64_t p0 = offset + t.q0, p1 = p0 + t.nq - 1, k1 = t.k0 + t.nk - 1;
  const int64_t bs = p.block_size, w = effective_window(p);
  if (t.k0 > p1 || p.doc[k1] < p.doc[p0] || p0 / bs - k1 / bs >= w) return TileMask::kSkip;
  if (k1 <= p0 && p.doc[t.k0] == p.doc[p1] && p1 / bs - t.k0 / bs < w) return TileMask::kFull;
  return TileMask::kPartial;
}

// Key tiles a query tile may see: from the one holding the earliest key visible to its first
// query (start of that query's doc or window) to the one holding its last query's position.
std::pair<int64_t, int64_t> key_tile_range(const AttentionParams& p, int64_t offset, int64_t q0,
                                           int64_t nq) {
  return {first_visible(p, offset + q0) / kBk, (offset + q0 + nq - 1) / kBk};
}

// Query tiles that may see a key tile (queries at their positions, T_kv == T): from its
// diagonal to the one holding the last query that sees its last key (end of that key's doc or
// window).
std::pair<int64_t, int64_t> query_tile_range(const AttentionParams& p, int64_t k0, int64_t nk) {
  const int64_t k1 = k0 + nk - 1;
  const int64_t doc_end = std::upper_bound(p.doc, p.doc + p.T, p.doc[k1]) - p.doc;
  const int64_t window_end = (k1 / p.block_size + effective_window(p)) * p.block_size;
  const int64_t hi = std::min({p.T, doc_end, window_end});
  return {k0 / kBq, (hi - 1) / kBq};
}

// The keys each query of a tile sees, as ranges [lo, hi) of tile columns; queries past the
// tile's own see none. first_visible_of is indexed by query, not position.
void visible_ranges(int64_t offset, const Tile& t, TileMask mask, const int64_t* first_visible_of,
                    int32_t* lo, int32_t* hi) {
  for (int64_t i = 0; i < kBq; ++i) {
    int64_t a = 0, b = 0;
    if (i < t.nq && mask == TileMask::kFull) {
      b = t.nk;
    } else if (i < t.nq) {
      a = std::clamp<int64_t>(first_visible_of[t.q0 + i] - t.k0, 0, t.nk);
      b = std::clamp<int64_t>(offset + t.q0 + i + 1 - t.k0, a, t.nk);
    }
    lo[i] = static_cast<int32_t>(a);
    hi[i] = static_cast<int32_t>(b);
  }
}

// first_visible of every query, once per call rather than once per row and tile visited.
std::vector<int64_t> first_visible_all(const AttentionParams& p, const Shape& s) {
  std::vector<int64_t> fv(static_cast<size_t>(s.T));
  for (int64_t i = 0; i < s.T; ++i) fv[static_cast<size_t>(i)] = first_visible(p, s.offset + i);
  return fv;
}

// Visited tiles of each query tile (a forward or dQ task's cost) and of each key tile (a dK/dV
// task's cost), the same for every head.
void visited_counts(const AttentionParams& p, const Shape& s, std::vector<int64_t>& per_query_tile,
                    std::vector<int64_t>& per_key_tile) {
  per_query_tile.assign(static_cast<size_t>(ceil_div(s.T, kBq)), 0);
  per_key_tile.assign(static_cast<size_t>(ceil_div(s.T_kv, kBk)), 0);
  for (int64_t qt = 0; qt < ceil_div(s.T, kBq); ++qt) {
    const int64_t q0 = qt * kBq, nq = std::min(kBq, s.T - q0);
    const auto [kt_lo, kt_hi] = key_tile_range(p, s.offset, q0, nq);
    for (int64_t kt = kt_lo; kt <= kt_hi; ++kt) {
      const Tile t{q0, nq, kt * kBk, std::min(kBk, s.T_kv - kt * kBk)};
      if (classify(p, s.offset, t) == TileMask::kSkip) continue;
      ++per_query_tile[static_cast<size_t>(qt)];
      ++per_key_tile[static_cast<size_t>(kt)];
    }
  }
}

// The shapes of packed operand blocks, each one tile of 64 tokens. A blocks are 64 rows by the
// head dimension as k (K, Q, dO as the left side of K·Qᵀ, Q·Kᵀ, dO·Vᵀ) or by 64 tokens as k
// (P, Pᵀ, dS, dSᵀ); B blocks are 64 columns by the head dimension as k (Q, K, V as the right
// side of those score products), or the head dimension as columns by 64 tokens as k (V, dO, Q,
// K as the right side of P·V, Pᵀ·dO, dSᵀ·Q, dS·K).
enum class Block { kRowsByD, kRowsByTile, kTileByD, kDByTile };

// The tile products of one call, on one micro-kernel: packing into its panels and running it
// over a block of micro-tiles. A block's micro-panels are located through the kernel's own
// layouts once, here, and every micro-panel is packed starting at k = 0, so the kernel can be
// run over a prefix of k (a partial tile's tokens).
class TileGemm {
 public:
  TileGemm(const MicroKernel& kernel, Precision precision, int64_t D)
      : kernel_(kernel),
        source_(precision == Precision::kBf16 ? PackSource::kF32ToBf16 : PackSource::kF32),
        mr_(kernel.mr),
        nr_(kernel.nr),
        ks_(kernel.k_step),
        bytes_(kernel.packed_bytes),
        pack_a_(kernel.pack_a[static_cast<int>(source_)]),
        pack_b_(kernel.pack_b[static_cast<int>(source_)]),
        rows_(round_up(kBq, kernel.mr)),
        dk_(round_up(D, kernel.k_step)),
        dn_(round_up(D, kernel.nr)) {
    if (pack_a_ == nullptr || pack_b_ == nullptr || kBk % nr_ != 0 || kBk % ks_ != 0) {
      throw Error(std::string("attention: the ") + kernel.isa + " micro-kernel cannot run " +
                  (precision == Precision::kBf16 ? "bf16" : "fp32") + " attention");
    }
    const layout::Layout la_d = kernel.a_layout(rows_, dk_), la_t = kernel.a_layout(rows_, kBk);
    const layout::Layout lb_d = kernel.b_layout(dk_, kBk), lb_t = kernel.b_layout(kBk, dn_);
    for (int64_t i = 0; i < rows_; i += mr_) {
      offsets(Block::kRowsByD).push_back(la_d(i, 0) * bytes_);
      offsets(Block::kRowsByTile).push_back(la_t(i, 0) * bytes_);
    }
    for (int64_t j = 0; j < kBk; j += nr_) offsets(Block::kTileByD).push_back(lb_d(0, j) * bytes_);
    for (int64_t j = 0; j < dn_; j += nr_) offsets(Block::kDByTile).push_back(lb_t(0, j) * bytes_);
    size_[static_cast<int>(Block::kRowsByD)] = rows_ * dk_ * bytes_;
    size_[static_cast<int>(Block::kRowsByTile)] = rows_ * kBk * bytes_;
    size_[static_cast<int>(Block::kTileByD)] = kBk * dk_ * bytes_;
    size_[static_cast<int>(Block::kDByTile)] = kBk * dn_ * bytes_;
  }

  // Bytes of a packed block, rounded up to a cache line.
  int64_t bytes(Block b) const { return round_up(size_[static_cast<int>(b)], 64); }
  int64_t rows() const { return rows_; }  // of an A block: kBq padded to mr
  int64_t dn() const { return dn_; }      // D padded to nr: the row length of accumulators
  int64_t dk() const { return dk_; }      // D padded to the k step
  int64_t k_steps(int64_t k) const { return round_up(k, ks_); }

  // An A block of `valid` rows of Y (Y[i][k] = src[i·ld + k], or src[k·ld + i] transposed) and
  // k_valid values of k; the rest of the block is zero.
  void pack_a(const float* src, int64_t ld, Trans trans, int64_t valid, int64_t k_valid, Block b,
              std::byte* out) const {
    const int64_t kp = b == Block::kRowsByD ? dk_ : kBk;
    const std::vector<int64_t>& off = offsets(b);
    for (size_t p = 0; p < off.size(); ++p) {
      const int64_t first = static_cast<int64_t>(p) * mr_;
      pack_a_(src, ld, trans, first, std::clamp<int64_t>(valid - first, 0, mr_), k_valid, kp,
              out + off[p]);
    }
  }

  // A B block seen as its columns: `valid` rows of Y = op(B)ᵀ, as for pack_a.
  void pack_b(const float* src, int64_t ld, Trans trans, int64_t valid, int64_t k_valid, Block b,
              std::byte* out) const {
    const int64_t kp = b == Block::kTileByD ? dk_ : kBk;
    const std::vector<int64_t>& off = offsets(b);
    for (size_t p = 0; p < off.size(); ++p) {
      const int64_t first = static_cast<int64_t>(p) * nr_;
      pack_b_(src, ld, trans, first, std::clamp<int64_t>(valid - first, 0, nr_), k_valid, kp,
              out + off[p]);
    }
  }

  // c[0:rows, 0:cols] (+)= A·B over the first kc values of k, rows and cols rounded up to
  // whole micro-tiles (c must have room for them).
  void product(int64_t rows, int64_t cols, int64_t kc, const std::byte* a, Block ba,
               const std::byte* b, Block bb, float* c, int64_t ldc, bool accumulate) const {
    const std::vector<int64_t>& a_off = offsets(ba);
    const std::vector<int64_t>& b_off = offsets(bb);
    for (int64_t jp = 0; jp < cols; jp += nr_) {
      const std::byte* bp = b + b_off[static_cast<size_t>(jp / nr_)];
      for (int64_t ip = 0; ip < rows; ip += mr_) {
        kernel_.fn(kc, a + a_off[static_cast<size_t>(ip / mr_)], bp, c + ip * ldc + jp, ldc,
                   accumulate);
      }
    }
  }

  void begin_task() const {
    if (kernel_.begin_task != nullptr) kernel_.begin_task();
  }
  void end_task() const {
    if (kernel_.end_task != nullptr) kernel_.end_task();
  }

 private:
  std::vector<int64_t>& offsets(Block b) { return offsets_[static_cast<int>(b)]; }
  const std::vector<int64_t>& offsets(Block b) const { return offsets_[static_cast<int>(b)]; }

  const MicroKernel& kernel_;
  PackSource source_;
  int64_t mr_, nr_, ks_, bytes_;
  PanelPackFn pack_a_, pack_b_;
  int64_t rows_, dk_, dn_;
  std::vector<int64_t> offsets_[4];  // bytes from a block's start to each micro-panel
  int64_t size_[4] = {};
};

// Calls begin_task/end_task around one task's products (AMX: the tile configuration is per
// thread, and released tiles cost nothing at a context switch).
class TaskScope {
 public:
  explicit TaskScope(const TileGemm& g) : g_(g) { g_.begin_task(); }
  ~TaskScope() { g_.end_task(); }
  TaskScope(const TaskScope&) = delete;
  TaskScope& operator=(const TaskScope&) = delete;

 private:
  const TileGemm& g_;
};

// Packed operands stay in the caches while their heads are worked on only if they are not too
// many: heads are processed in groups whose packed operands take about this much (at least one
// head), about one core's L2 here. At T = 1024, D = 128 that is one head per group backward
// and two (fp32) or four (bf16) forward. Measured single-threaded on the speedrun shape, one
// head per group beat all six at once by 4-10% backward; with two threads the difference was
// within the noise.
std::atomic<int64_t> packed_budget{int64_t{2} << 20};

int64_t heads_per_group(int64_t bytes_per_head, int64_t H) {
  return std::clamp<int64_t>(packed_budget.load(std::memory_order_relaxed) / bytes_per_head, 1, H);
}

// The calling thread's buffer for packed operands, kept across calls (as the GEMM driver keeps
// its own) so that each call does not fault its pages in again.
std::byte* packing_workspace(int64_t bytes) {
  thread_local AlignedBuffer buf;
  buf.reserve(static_cast<size_t>(bytes));
  return buf.data();
}

// One operand of the heads [h0, h0 + heads) of a group, packed in blocks of 64 tokens: block
// (h, t) at ((h − h0)·nt + t)·block_bytes. Carved from the workspace at *offset, which it
// advances.
struct Packed {
  std::byte* base;
  int64_t block_bytes, nt, h0;
  Packed(const TileGemm& g, Block b, int64_t n_tiles, int64_t first_head, int64_t heads,
         std::byte* workspace, int64_t* offset)
      : base(workspace + *offset), block_bytes(g.bytes(b)), nt(n_tiles), h0(first_head) {
    *offset += heads * nt * block_bytes;
  }
  std::byte* at(int64_t h, int64_t t) const { return base + ((h - h0) * nt + t) * block_bytes; }
};

// Tasks by key/value head, and within one in decreasing cost, so the tasks left for the end of
// the loop are short, and the threads work on the same packed operands. The order changes no
// result: each task computes its outputs alone.
struct Task {
  int64_t cost, tile;
  int64_t h;   // the query head (a key-tile task: the key/value head)
  int64_t kv;  // the key/value head whose operands it reads
  int kind;    // backward: 0 owns a key tile (dK, dV), 1 a query tile (dQ)
};

void sort_tasks(std::vector<Task>& tasks) {
  std::stable_sort(tasks.begin(), tasks.end(), [](const Task& a, const Task& b) {
    return a.kv != b.kv ? a.kv < b.kv : a.cost > b.cost;
  });
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Forward: pack every K/V head's K (as the left side of K·Qᵀ) and V (the right side of P·V)
// once, then one task per (query head, query tile), reading its group's K/V head. Scores are
// computed transposed, keys by queries, so the softmax runs with queries along the vector
// lanes and P is read by the packer with its queries contiguous (the packers' fast direction).
// The task's output rows live in `o` while the key tiles stream past, rescaled whenever a
// row's running max grows. In bf16 the packers round q, k, v and P as they copy; the scores,
// the softmax statistics and o stay fp32. Key tiles a query does not see contribute exact
// zeros, so a query's bits depend only on the key tiles, not on which other queries share its
// tile: decoding over a cache gives the rows a full forward gives.

void attention_forward_with(const MicroKernel& kernel, const AttentionParams& p, float* out,
                            float* lse) {
  validate_tensors(p, "attention_forward");
  const Shape sh = shape_of(p);
  if (sh.T == 0) return;
  const int64_t T = sh.T, H = sh.H, D = sh.D, hd = H * D, nqt = ceil_div(T, kBq);
  const int64_t nkt = ceil_div(sh.T_kv, kBk);
  const TileGemm g(kernel, p.precision, D);
  const int64_t dn = g.dn(), rows = g.rows();
  const std::vector<int64_t> fv = first_visible_all(p, sh);
  std::vector<int64_t> per_qt, per_kt;
  visited_counts(p, sh, per_qt, per_kt);

  ThreadPool& pool = ThreadPool::current();
  struct Scratch {
    AlignedBuffer q, p, s, o;
    float m[kBq], l[kBq], alpha[kBq];
    int32_t lo[kBq], hi[kBq];
  };
  std::vector<Scratch> scratch(static_cast<size_t>(pool.size()));
  const int64_t kv_head_bytes = nkt * (g.bytes(Block::kRowsByD) + g.bytes(Block::kDByTile));
  const int64_t group = heads_per_group(kv_head_bytes, sh.H_kv);
  std::byte* workspace = packing_workspace(group * kv_head_bytes);
  for (int64_t g0 = 0; g0 < sh.H_kv; g0 += group) {
    const int64_t kv_heads = std::min(group, sh.H_kv - g0);
    int64_t offset = 0;
    const Packed k_pack(g, Block::kRowsByD, nkt, g0, kv_heads, workspace, &offset);
    const Packed v_pack(g, Block::kDByTile, nkt, g0, kv_heads, workspace, &offset);
    pool.parallel_for(static_cast<size_t>(kv_heads * nkt), [&](size_t task, int) {
      const int64_t kv = g0 + static_cast<int64_t>(task) / nkt;
      const int64_t kt = static_cast<int64_t>(task) % nkt;
      const int64_t k0 = kt * kBk, nk = std::min(kBk, sh.T_kv - k0);
      const int64_t at = k0 * sh.ld_kv + kv * D;
      g.pack_a(p.k + at, sh.ld_kv, Trans::kNo, nk, D, Block::kRowsByD, k_pack.at(kv, kt));
      g.pack_b(p.v + at, sh.ld_kv, Trans::kYes, D, nk, Block::kDByTile, v_pack.at(kv, kt));
    });

    std::vector<Task> tasks;
    for (int64_t h = g0 * sh.per_group; h < (g0 + kv_heads) * sh.per_group; ++h) {
      for (int64_t qt = nqt - 1; qt >= 0; --qt) {
        tasks.push_back({per_qt[static_cast<size_t>(qt)], qt, h, sh.kv_head(h), 0});
      }
    }
    sort_tasks(tasks);
    pool.parallel_for(tasks.size(), [&](size_t index, int worker) {
      const int64_t h = tasks[index].h, kv = tasks[index].kv, q0 = tasks[index].tile * kBq;
      const int64_t nq = std::min(kBq, T - q0);
      Scratch& w = scratch[static_cast<size_t>(worker)];
      w.q.reserve(static_cast<size_t>(g.bytes(Block::kTileByD)));
      w.p.reserve(static_cast<size_t>(g.bytes(Block::kRowsByTile)));
      w.s.reserve(static_cast<size_t>(rows * kBq) * sizeof(float), /*zero_new=*/true);
      w.o.reserve(static_cast<size_t>(rows * dn) * sizeof(float));
      float* s = w.s.floats();
      float* o = w.o.floats();
      std::fill(o, o + rows * dn, 0.0f);
      std::fill(w.m, w.m + kBq, kNegInf);
      std::fill(w.l, w.l + kBq, 0.0f);
      const TaskScope scope(g);
      g.pack_b(p.q + q0 * sh.ld_q + h * D, sh.ld_q, Trans::kNo, nq, D, Block::kTileByD, w.q.data());
      const auto [kt_lo, kt_hi] = key_tile_range(p, sh.offset, q0, nq);
      for (int64_t kt = kt_lo; kt <= kt_hi; ++kt) {
        const Tile t{q0, nq, kt * kBk, std::min(kBk, sh.T_kv - kt * kBk)};
        const TileMask mask = classify(p, sh.offset, t);
        if (mask == TileMask::kSkip) continue;
        g.product(t.nk, nq, g.dk(), k_pack.at(kv, kt), Block::kRowsByD, w.q.data(), Block::kTileByD,
                  s, kBq, false);
        visible_ranges(sh.offset, t, mask, fv.data(), w.lo, w.hi);
        online_softmax_tile(s, t.nk, w.lo, w.hi, mask == TileMask::kFull, p.scale, w.m, w.l,
                            w.alpha);
        scale_rows(o, nq, dn, w.alpha);
        g.pack_a(s, kBq, Trans::kYes, nq, t.nk, Block::kRowsByTile, w.p.data());
        g.product(nq, D, g.k_steps(t.nk), w.p.data(), Block::kRowsByTile, v_pack.at(kv, kt),
                  Block::kDByTile, o, dn, true);
      }
      for (int64_t i = 0; i < nq; ++i) {
        float* dst = out + (q0 + i) * hd + h * D;
        const float inv = 1.0f / w.l[i];
        for (int64_t e = 0; e < D; ++e) dst[e] = o[i * dn + e] * inv;
        lse[h * T + q0 + i] = w.m[i] + std::log(w.l[i]);
      }
    });
  }
}

// ---------------------------------------------------------------------------------------------
// Backward. With P = softmax rows, dP = dO·Vᵀ and Delta_i = dO_i·O_i = Σ_j P_ij dP_ij:
//   dS = scale·P∘(dP − Delta),  dV = Pᵀ·dO,  dK = dSᵀ·Q,  dQ = dS·K,
// dK and dV of a K/V head summed over the query heads of its group. Each head's operands are
// packed once per call, each in the roles it plays (Q, dO as the left side of the score
// products and as the right side of dK, dV; K as the right side of Q·Kᵀ and of dQ; V of
// dO·Vᵀ), K and V once per K/V head. Then two kinds of task share one parallel loop: one owns a
// key tile of a K/V head (dK, dV) and walks, query head by query head of its group, the query
// tiles that see it; one owns a query tile of a query head (dQ) and walks its key tiles. Both
// recompute P and dS, which costs FLOPs but needs no T×T storage and no atomics, and each
// output is summed in one fixed order. Scores are queries by keys here: the key-tile task reads
// Pᵀ and dSᵀ in the packers' fast direction, the query-tile task reads dS in the other (for
// fp32 kernels a strided copy; computing its scores transposed instead would take four more
// packed operands). In bf16 the packers round q, k, v, dO, P and dS.

void attention_backward_with(const MicroKernel& kernel, const AttentionParams& p, const float* out,
                             const float* lse, const float* dout, float* dq, float* dk, float* dv) {
  validate_backward(p, "attention_backward");
  const Shape sh = shape_of(p);
  if (sh.T == 0) return;
  const int64_t T = sh.T, H = sh.H, D = sh.D, hd = H * D, nt = ceil_div(T, kBk);
  const int64_t per_group = sh.per_group;
  const TileGemm g(kernel, p.precision, D);
  const int64_t dn = g.dn(), rows = g.rows();
  const std::vector<int64_t> fv = first_visible_all(p, sh);
  std::vector<int64_t> per_qt, per_kt;
  visited_counts(p, sh, per_qt, per_kt);

  std::vector<float> delta(static_cast<size_t>(H * T));
  const bool bf16_operands = p.precision == Precision::kBf16;
  ThreadPool& pool = ThreadPool::current();
  struct Scratch {
    AlignedBuffer a, s, dp, acc0, acc1;
  };
  std::vector<Scratch> scratch(static_cast<size_t>(pool.size()));
  // Per worker: a row of dO rounded to bf16, for Delta.
  std::vector<std::vector<float>> rounded_dout(static_cast<size_t>(pool.size()),
                                               std::vector<float>(static_cast<size_t>(D)));
  const int64_t q_head_bytes = nt * (2 * g.bytes(Block::kRowsByD) + 2 * g.bytes(Block::kDByTile));
  const int64_t kv_head_bytes =
      per_group * q_head_bytes + nt * (2 * g.bytes(Block::kTileByD) + g.bytes(Block::kDByTile));
  const int64_t group = heads_per_group(kv_head_bytes, sh.H_kv);
  std::byte* workspace = packing_workspace(group * kv_head_bytes);
  for (int64_t g0 = 0; g0 < sh.H_kv; g0 += group) {
    const int64_t kv_heads = std::min(group, sh.H_kv - g0);
    const int64_t h0 = g0 * per_group, heads = kv_heads * per_group;
    int64_t offset = 0;
    const Packed q_a(g, Block::kRowsByD, nt, h0, heads, workspace, &offset);
    const Packed dout_a(g, Block::kRowsByD, nt, h0, heads, workspace, &offset);
    const Packed q_b(g, Block::kDByTile, nt, h0, heads, workspace, &offset);
    const Packed dout_b(g, Block::kDByTile, nt, h0, heads, workspace, &offset);
    const Packed k_b(g, Block::kTileByD, nt, g0, kv_heads, workspace, &offset);
    const Packed v_b(g, Block::kTileByD, nt, g0, kv_heads, workspace, &offset);
    const Packed kt_b(g, Block::kDByTile, nt, g0, kv_heads, workspace, &offset);
    // One task per (query head, tile); the first query head of a group packs its K/V head too.
    pool.parallel_for(static_cast<size_t>(heads * nt), [&](size_t task, int worker) {
      const int64_t h = h0 + static_cast<int64_t>(task) / nt;
      const int64_t t = static_cast<int64_t>(task) % nt;
      const int64_t t0 = t * kBk, n = std::min(kBk, T - t0);
      const float* q = p.q + t0 * sh.ld_q + h * D;
      const float* g_out = dout + t0 * hd + h * D;
      g.pack_a(q, sh.ld_q, Trans::kNo, n, D, Block::kRowsByD, q_a.at(h, t));
      g.pack_a(g_out, hd, Trans::kNo, n, D, Block::kRowsByD, dout_a.at(h, t));
      g.pack_b(q, sh.ld_q, Trans::kYes, D, n, Block::kDByTile, q_b.at(h, t));
      g.pack_b(g_out, hd, Trans::kYes, D, n, Block::kDByTile, dout_b.at(h, t));
      if (h % per_group == 0) {
        const int64_t kv = sh.kv_head(h);
        const float* k = p.k + t0 * sh.ld_kv + kv * D;
        const float* v = p.v + t0 * sh.ld_kv + kv * D;
        g.pack_b(k, sh.ld_kv, Trans::kNo, n, D, Block::kTileByD, k_b.at(kv, t));
        g.pack_b(v, sh.ld_kv, Trans::kNo, n, D, Block::kTileByD, v_b.at(kv, t));
        g.pack_b(k, sh.ld_kv, Trans::kYes, D, n, Block::kDByTile, kt_b.at(kv, t));
      }
      float* rounded = rounded_dout[static_cast<size_t>(worker)].data();
      for (int64_t i = t0; i < t0 + n; ++i) {
        const float* dout_row = dout + i * hd + h * D;
        if (bf16_operands) {
          round_row_to_bf16(dout_row, D, rounded);
          dout_row = rounded;
        }
        delta[static_cast<size_t>(h * T + i)] = dot_double(dout_row, out + i * hd + h * D, D);
      }
    });

    // A key-tile task runs four products per visited tile and query head of its group, a
    // query-tile task three per visited tile.
    std::vector<Task> tasks;
    for (int64_t kv = g0; kv < g0 + kv_heads; ++kv) {
      for (int64_t t = 0; t < nt; ++t) {
        tasks.push_back({4 * per_group * per_kt[static_cast<size_t>(t)], t, kv, kv, 0});
      }
      for (int64_t h = kv * per_group; h < (kv + 1) * per_group; ++h) {
        for (int64_t t = nt - 1; t >= 0; --t) {
          tasks.push_back({3 * per_qt[static_cast<size_t>(t)], t, h, kv, 1});
        }
      }
    }
    sort_tasks(tasks);
    pool.parallel_for(tasks.size(), [&](size_t index, int worker) {
      const Task& task = tasks[index];
      const int64_t kv = task.kv;
      Scratch& w = scratch[static_cast<size_t>(worker)];
      w.a.reserve(static_cast<size_t>(g.bytes(Block::kRowsByTile)));
      w.s.reserve(static_cast<size_t>(rows * kBk) * sizeof(float), /*zero_new=*/true);
      w.dp.reserve(static_cast<size_t>(rows * kBk) * sizeof(float), /*zero_new=*/true);
      w.acc0.reserve(static_cast<size_t>(rows * dn) * sizeof(float));
      w.acc1.reserve(static_cast<size_t>(rows * dn) * sizeof(float));
      float *s = w.s.floats(), *dp = w.dp.floats(), *acc0 = w.acc0.floats(),
            *acc1 = w.acc1.floats();
      std::fill(acc0, acc0 + rows * dn, 0.0f);
      std::fill(acc1, acc1 + rows * dn, 0.0f);
      const TaskScope scope(g);
      // P into s and dS into dp for one tile of query head h.
      int32_t lo[kBq], hi[kBq];
      auto probs_and_grads = [&](int64_t h, const Tile& t, TileMask mask, int64_t qt, int64_t kt) {
        g.product(t.nq, t.nk, g.dk(), q_a.at(h, qt), Block::kRowsByD, k_b.at(kv, kt),
                  Block::kTileByD, s, kBk, false);
        g.product(t.nq, t.nk, g.dk(), dout_a.at(h, qt), Block::kRowsByD, v_b.at(kv, kt),
                  Block::kTileByD, dp, kBk, false);
        visible_ranges(0, t, mask, fv.data(), lo, hi);
        probs_and_grads_tile(s, dp, t.nq, lo, hi, p.scale, lse + h * T + t.q0,
                             delta.data() + h * T + t.q0);
      };
      auto store = [&](const float* acc, int64_t t0, int64_t n, float* dst, int64_t ld) {
        for (int64_t i = 0; i < n; ++i) {
          std::memcpy(dst + (t0 + i) * ld, acc + i * dn, static_cast<size_t>(D) * sizeof(float));
        }
      };
      if (task.kind == 0) {
        // dV (acc0) and dK (acc1): Pᵀ and dSᵀ are read from the tile transposed by the packer.
        const int64_t kt = task.tile, k0 = kt * kBk, nk = std::min(kBk, T - k0);
        const auto [qt_lo, qt_hi] = query_tile_range(p, k0, nk);
        for (int64_t h = kv * per_group; h < (kv + 1) * per_group; ++h) {
          for (int64_t qt = qt_lo; qt <= qt_hi; ++qt) {
            const Tile t{qt * kBq, std::min(kBq, T - qt * kBq), k0, nk};
            const TileMask mask = classify(p, 0, t);
            if (mask == TileMask::kSkip) continue;
            probs_and_grads(h, t, mask, qt, kt);
            const int64_t kc = g.k_steps(t.nq);
            g.pack_a(s, kBk, Trans::kYes, nk, t.nq, Block::kRowsByTile, w.a.data());
            g.product(nk, D, kc, w.a.data(), Block::kRowsByTile, dout_b.at(h, qt), Block::kDByTile,
                      acc0, dn, true);
            g.pack_a(dp, kBk, Trans::kYes, nk, t.nq, Block::kRowsByTile, w.a.data());
            g.product(nk, D, kc, w.a.data(), Block::kRowsByTile, q_b.at(h, qt), Block::kDByTile,
                      acc1, dn, true);
          }
        }
        store(acc0, k0, nk, dv + kv * D, sh.ld_kv);
        store(acc1, k0, nk, dk + kv * D, sh.ld_kv);
      } else {
        // dQ (acc0).
        const int64_t h = task.h, qt = task.tile, q0 = qt * kBq, nq = std::min(kBq, T - q0);
        const auto [kt_lo, kt_hi] = key_tile_range(p, 0, q0, nq);
        for (int64_t kt = kt_lo; kt <= kt_hi; ++kt) {
          const Tile t{q0, nq, kt * kBk, std::min(kBk, T - kt * kBk)};
          const TileMask mask = classify(p, 0, t);
          if (mask == TileMask::kSkip) continue;
          probs_and_grads(h, t, mask, qt, kt);
          g.pack_a(dp, kBk, Trans::kNo, nq, t.nk, Block::kRowsByTile, w.a.data());
          g.product(nq, D, g.k_steps(t.nk), w.a.data(), Block::kRowsByTile, kt_b.at(kv, kt),
                    Block::kDByTile, acc0, dn, true);
        }
        store(acc0, q0, nq, dq + h * D, sh.ld_q);
      }
    });
  }
}

int64_t set_attention_packed_budget(int64_t bytes) {
  return packed_budget.exchange(bytes);
}

namespace {

const MicroKernel& kernel_for(Precision precision) {
  return precision == Precision::kBf16 ? active_bf16_microkernel() : active_microkernel();
}

}  // namespace

void attention_forward(const AttentionParams& p, float* out, float* lse) {
  attention_forward_with(kernel_for(p.precision), p, out, lse);
}

void attention_backward(const AttentionParams& p, const float* out, const float* lse,
                        const float* dout, float* dq, float* dk, float* dv) {
  attention_backward_with(kernel_for(p.precision), p, out, lse, dout, dq, dk, dv);
}

double attention_visited_fraction(const AttentionParams& p) {
  validate(p, "attention_visited_fraction");
  const Shape sh = shape_of(p);
  if (sh.T == 0) return 0.0;
  std::vector<int64_t> per_qt, per_kt;
  visited_counts(p, sh, per_qt, per_kt);
  int64_t visited = 0;
  for (int64_t n : per_qt) visited += n;
  return static_cast<double>(visited) /
         static_cast<double>(ceil_div(sh.T, kBq) * ceil_div(sh.T_kv, kBk));
}

// ---------------------------------------------------------------------------------------------
// References: every (query, key) pair, scores in double, no tiling and no skipping.

namespace {

// Scaled scores of query i (at position offset + i) of head h against every key position, in
// double; hidden keys get -inf.
void reference_scores(const AttentionParams& p, const Shape& sh, int64_t h, int64_t i,
                      std::vector<double>& s) {
  s.assign(static_cast<size_t>(sh.T_kv), -std::numeric_limits<double>::infinity());
  const int64_t pos = sh.offset + i;
  const float* qi = p.q + i * sh.ld_q + h * p.D;
  for (int64_t j = 0; j <= pos; ++j) {
    if (!visible(p, pos, j)) continue;
    const float* kj = p.k + j * sh.ld_kv + sh.kv_head(h) * p.D;
    double dot = 0;
    for (int64_t e = 0; e < p.D; ++e) dot += static_cast<double>(qi[e]) * kj[e];
    s[static_cast<size_t>(j)] = static_cast<double>(p.scale) * dot;
  }
}

// Turns the scores of the query at position pos into probabilities in place; returns the
// log-sum-exp.
double reference_softmax(int64_t pos, std::vector<double>& s) {
  double m = -std::numeric_limits<double>::infinity();
  for (int64_t j = 0; j <= pos; ++j) m = std::max(m, s[static_cast<size_t>(j)]);
  double sum = 0;
  for (int64_t j = 0; j <= pos; ++j) sum += std::exp(s[static_cast<size_t>(j)] - m);
  for (int64_t j = 0; j <= pos; ++j) {
    s[static_cast<size_t>(j)] = std::exp(s[static_cast<size_t>(j)] - m) / sum;
  }
  return m + std::log(sum);
}

}  // namespace

void attention_forward_reference(const AttentionParams& p, float* out, float* lse) {
  validate_tensors(p, "attention_forward_reference");
  const Shape sh = shape_of(p);
  const int64_t hd = p.H * p.D;
  std::vector<double> s, o(static_cast<size_t>(p.D));
  for (int64_t h = 0; h < p.H; ++h) {
    const int64_t kv = sh.kv_head(h);
    for (int64_t i = 0; i < p.T; ++i) {
      const int64_t pos = sh.offset + i;
      reference_scores(p, sh, h, i, s);
      lse[h * p.T + i] = static_cast<float>(reference_softmax(pos, s));
      std::fill(o.begin(), o.end(), 0.0);
      for (int64_t j = 0; j <= pos; ++j) {
        const double pij = s[static_cast<size_t>(j)];
        if (pij == 0) continue;
        const float* vj = p.v + j * sh.ld_kv + kv * p.D;
        for (int64_t e = 0; e < p.D; ++e) o[static_cast<size_t>(e)] += pij * vj[e];
      }
      for (int64_t e = 0; e < p.D; ++e) {
        out[i * hd + h * p.D + e] = static_cast<float>(o[static_cast<size_t>(e)]);
      }
    }
  }
}

void attention_backward_reference(const AttentionParams& p, const float* dout, float* dq, float* dk,
                                  float* dv) {
  validate_backward(p, "attention_backward_reference");
  const Shape sh = shape_of(p);
  const int64_t T = p.T, D = p.D, hd = p.H * p.D;
  const double scale = p.scale;
  std::vector<double> s, dp(static_cast<size_t>(T));
  std::vector<double> gq(static_cast<size_t>(T * D)), gk(gq.size()), gv(gq.size());
  for (int64_t kv = 0; kv < sh.H_kv; ++kv) {
    std::fill(gk.begin(), gk.end(), 0.0);
    std::fill(gv.begin(), gv.end(), 0.0);
    for (int64_t h = kv * sh.per_group; h < (kv + 1) * sh.per_group; ++h) {
      std::fill(gq.begin(), gq.end(), 0.0);
      for (int64_t i = 0; i < T; ++i) {
        reference_scores(p, sh, h, i, s);
        reference_softmax(i, s);
        const float* doi = dout + i * hd + h * D;
        // Delta from P and dP, not from the forward output, so this path shares nothing with
        // the kernel's dO·O.
        double delta = 0;
        for (int64_t j = 0; j <= i; ++j) {
          double d = 0;
          if (s[static_cast<size_t>(j)] != 0) {
            const float* vj = p.v + j * sh.ld_kv + kv * D;
            for (int64_t e = 0; e < D; ++e) d += static_cast<double>(doi[e]) * vj[e];
          }
          dp[static_cast<size_t>(j)] = d;
          delta += s[static_cast<size_t>(j)] * d;
        }
        const float* qi = p.q + i * sh.ld_q + h * D;
        for (int64_t j = 0; j <= i; ++j) {
          const double pij = s[static_cast<size_t>(j)];
          if (pij == 0) continue;
          const double ds = scale * pij * (dp[static_cast<size_t>(j)] - delta);
          const float* kj = p.k + j * sh.ld_kv + kv * D;
          for (int64_t e = 0; e < D; ++e) {
            gq[static_cast<size_t>(i * D + e)] += ds * kj[e];
            gk[static_cast<size_t>(j * D + e)] += ds * qi[e];
            gv[static_cast<size_t>(j * D + e)] += pij * doi[e];
          }
        }
      }
      for (int64_t t = 0; t < T; ++t) {
        for (int64_t e = 0; e < D; ++e) {
          dq[t * sh.ld_q + h * D + e] = static_cast<float>(gq[static_cast<size_t>(t * D + e)]);
        }
      }
    }
    for (int64_t t = 0; t < T; ++t) {
      for (int64_t e = 0; e < D; ++e) {
        const size_t idx = static_cast<size_t>(t * D + e);
        dk[t * sh.ld_kv + kv * D + e] = static_cast<float>(gk[idx]);
        dv[t * sh.ld_kv + kv * D + e] = static_cast<float>(gv[idx]);
      }
    }
  }
}

}  // namespace nanogpt
