#include "kernels/attention.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "runtime/cpu_info.hpp"
#include "runtime/error.hpp"
#include "runtime/thread_pool.hpp"

namespace nanogpt {

namespace {

// Tiles of kBq queries × kBk keys. 64 divides the speedrun's 128-token mask blocks, so a tile
// never straddles a block boundary and most tiles are either fully visible or skipped; other
// block sizes still work, they just take the elementwise-mask path more often.
constexpr int64_t kBq = 64;
constexpr int64_t kBk = 64;
// Row lengths of tile buffers are padded to whole AVX-512 vectors so the inner loops never need
// a scalar tail; padding holds zeros, so it adds nothing to any sum.
constexpr int64_t kVec = 16;
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

int64_t round_up(int64_t x, int64_t m) {
  return (x + m - 1) / m * m;
}

// ---------------------------------------------------------------------------------------------
// Inner loops. Everything below this line and above "Tile geometry" is what a bf16/AMX rewrite
// replaces; the tiling, masking and passes further down do not depend on it.

// C[0:rows, 0:NV·lanes] (+)= A[0:rows, 0:K]·B[0:K, 0:NV·lanes], with A element (r, k) at
// A[r·ars + k·acs] (so a transposed operand costs nothing) and B row-major. The R×NV vector
// accumulators stay in registers through the K loop; GCC vector types make that explicit
// rather than hoping an array gets scalarized. Rows past `rows` repeat the last valid row and
// are not stored, which keeps R a compile-time constant.
template <typename V, int R, int NV>
inline __attribute__((always_inline)) void gemm_block(int64_t K, const float* A, int64_t ars,
                                                      int64_t acs, int64_t rows, const float* B,
                                                      int64_t ldb, float* C, int64_t ldc,
                                                      bool accumulate) {
  constexpr int64_t kLanes = sizeof(V) / sizeof(float);
  const float* a[R];
  V acc[R][NV];
  for (int r = 0; r < R; ++r) {
    const int64_t row = std::min<int64_t>(r, rows - 1);
    a[r] = A + row * ars;
    for (int c = 0; c < NV; ++c) {
      if (accumulate) {
        std::memcpy(&acc[r][c], C + row * ldc + c * kLanes, sizeof(V));
      } else {
        acc[r][c] = V{};
      }
    }
  }
  for (int64_t k = 0; k < K; ++k) {
    V b[NV];
    for (int c = 0; c < NV; ++c) std::memcpy(&b[c], B + k * ldb + c * kLanes, sizeof(V));
    for (int r = 0; r < R; ++r) {
      const float ar = a[r][k * acs];
      for (int c = 0; c < NV; ++c) acc[r][c] += ar * b[c];
    }
  }
  for (int r = 0; r < R; ++r) {
    if (r >= rows) break;
    for (int c = 0; c < NV; ++c) std::memcpy(C + r * ldc + c * kLanes, &acc[r][c], sizeof(V));
  }
}

// C[M, N] (+)= A[M, K]·B[K, N] on L1/L2-resident tiles; N is a multiple of kVec. Column
// chunks of NV vectors, then single vectors for the rest.
template <typename V, int R, int NV>
inline __attribute__((always_inline)) void tile_gemm_impl(int64_t M, int64_t N, int64_t K,
                                                          const float* A, int64_t ars, int64_t acs,
                                                          const float* B, int64_t ldb, float* C,
                                                          int64_t ldc, bool accumulate) {
  constexpr int64_t kChunk = NV * static_cast<int64_t>(sizeof(V) / sizeof(float));
  constexpr int64_t kOne = kVec / static_cast<int64_t>(sizeof(V) / sizeof(float));
  static_assert(kChunk % kVec == 0 && kOne >= 1);
  int64_t n0 = 0;
  for (; n0 + kChunk <= N; n0 += kChunk) {
    for (int64_t m0 = 0; m0 < M; m0 += R) {
      gemm_block<V, R, NV>(K, A + m0 * ars, ars, acs, std::min<int64_t>(R, M - m0), B + n0, ldb,
                           C + m0 * ldc + n0, ldc, accumulate);
    }
  }
  for (; n0 < N; n0 += kVec) {
    for (int64_t m0 = 0; m0 < M; m0 += R) {
      gemm_block<V, R, kOne>(K, A + m0 * ars, ars, acs, std::min<int64_t>(R, M - m0), B + n0, ldb,
                             C + m0 * ldc + n0, ldc, accumulate);
    }
  }
}

// One register-block shape per ISA, sized to its register file: 32 zmm hold 4×2 accumulators
// plus operands with room to spare; 16 ymm hold 6×2 (the shape of gemm.cpp's micro-kernel);
// 16 xmm hold 2×4.
using f32x16 = float __attribute__((vector_size(64)));
using f32x8 = float __attribute__((vector_size(32)));
using f32x4 = float __attribute__((vector_size(16)));

__attribute__((target("avx512f"))) void tile_gemm_avx512(int64_t M, int64_t N, int64_t K,
                                                         const float* A, int64_t ars, int64_t acs,
                                                         const float* B, int64_t ldb, float* C,
                                                         int64_t ldc, bool accumulate) {
  tile_gemm_impl<f32x16, 4, 2>(M, N, K, A, ars, acs, B, ldb, C, ldc, accumulate);
}

__attribute__((target("avx2,fma"))) void tile_gemm_avx2(int64_t M, int64_t N, int64_t K,
                                                        const float* A, int64_t ars, int64_t acs,
                                                        const float* B, int64_t ldb, float* C,
                                                        int64_t ldc, bool accumulate) {
  tile_gemm_impl<f32x8, 6, 2>(M, N, K, A, ars, acs, B, ldb, C, ldc, accumulate);
}

void tile_gemm_sse(int64_t M, int64_t N, int64_t K, const float* A, int64_t ars, int64_t acs,
                   const float* B, int64_t ldb, float* C, int64_t ldc, bool accumulate) {
  tile_gemm_impl<f32x4, 2, 4>(M, N, K, A, ars, acs, B, ldb, C, ldc, accumulate);
}

// Picked once from the CPU's features. The paths differ in the last bits (FMA or not), so
// results are reproducible per machine, and never depend on the thread count.
using TileGemm = void (*)(int64_t, int64_t, int64_t, const float*, int64_t, int64_t, const float*,
                          int64_t, float*, int64_t, bool);

void tile_gemm(int64_t M, int64_t N, int64_t K, const float* A, int64_t ars, int64_t acs,
               const float* B, int64_t ldb, float* C, int64_t ldc, bool accumulate) {
  static const TileGemm impl = [] {
    const CpuInfo& cpu = cpu_info();
    if (cpu.avx512f) return &tile_gemm_avx512;
    if (cpu.avx2 && cpu.fma) return &tile_gemm_avx2;
    return &tile_gemm_sse;
  }();
  impl(M, N, K, A, ars, acs, B, ldb, C, ldc, accumulate);
}

// exp(x) to ~1 ulp (Cephes expf), written without calls or branches so loops over it
// vectorize; libm's expf does not without -ffast-math. Returns exactly 0 below -87, which
// covers the -inf of masked scores.
inline float exp_vec(float x) {
  const float xc = x < -87.0f ? -87.0f : (x > 88.0f ? 88.0f : x);
  // Round to nearest by the 1.5·2^23 trick: no floor/rint call that SSE2 cannot inline.
  const float n = (xc * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
  float r = xc - n * 0.693359375f;  // ln 2 split in two so r is exact to float precision
  r = r - n * -2.12194440e-4f;
  const float z = r * r;
  float y = 1.9875691500e-4f;
  y = y * r + 1.3981999507e-3f;
  y = y * r + 8.3334519073e-3f;
  y = y * r + 4.1665795894e-2f;
  y = y * r + 1.6666665459e-1f;
  y = y * r + 5.0000001201e-1f;
  y = y * z + r + 1.0f;
  const float two_n = std::bit_cast<float>((static_cast<int32_t>(n) + 127) << 23);
  return x < -87.0f ? 0.0f : y * two_n;
}

__attribute__((target_clones("avx512f", "arch=haswell", "default"))) void scale_in_place(
    float* s, int64_t n, float scale) {
  for (int64_t j = 0; j < n; ++j) s[j] *= scale;
}

// Max of s[0:n], n a multiple of kVec; -inf when every entry is masked.
__attribute__((target_clones("avx512f", "arch=haswell", "default"))) float row_max(const float* s,
                                                                                   int64_t n) {
  float lanes[kVec];
  for (int64_t c = 0; c < kVec; ++c) lanes[c] = kNegInf;
  for (int64_t j = 0; j < n; j += kVec) {
    for (int64_t c = 0; c < kVec; ++c) lanes[c] = s[j + c] > lanes[c] ? s[j + c] : lanes[c];
  }
  float m = kNegInf;
  for (int64_t c = 0; c < kVec; ++c) m = lanes[c] > m ? lanes[c] : m;
  return m;
}

// s[j] = exp(s[j] - shift) in place (0 where s[j] = -inf); returns the sum. n is a multiple of
// kVec. The sum runs over fixed lanes, so its rounding depends on n alone.
__attribute__((target_clones("avx512f", "arch=haswell", "default"))) float exp_shifted(
    float* s, int64_t n, float shift) {
  float lanes[kVec] = {};
  for (int64_t j = 0; j < n; j += kVec) {
    for (int64_t c = 0; c < kVec; ++c) {
      const float e = exp_vec(s[j + c] - shift);
      s[j + c] = e;
      lanes[c] += e;
    }
  }
  float sum = 0.0f;
  for (int64_t c = 0; c < kVec; ++c) sum += lanes[c];
  return sum;
}

// ds[j] = scale·p[j]·(ds[j] - delta): ds holds dP on entry.
__attribute__((target_clones("avx512f", "arch=haswell", "default"))) void score_grad(
    const float* p, float* ds, int64_t n, float delta, float scale) {
  for (int64_t j = 0; j < n; ++j) ds[j] = scale * p[j] * (ds[j] - delta);
}

// Σ a·b in double, rounded once: Delta = dO·O is subtracted from every dP of its row, so its
// error would land on every dS. Fixed lanes keep the order (and the result) independent of ISA
// choices the compiler makes, while still vectorizing.
__attribute__((target_clones("avx512f", "arch=haswell", "default"))) float dot_double(
    const float* a, const float* b, int64_t n) {
  constexpr int64_t kLanes = 8;
  double lanes[kLanes] = {};
  int64_t e = 0;
  for (; e + kLanes <= n; e += kLanes) {
    for (int64_t c = 0; c < kLanes; ++c) lanes[c] += static_cast<double>(a[e + c]) * b[e + c];
  }
  for (; e < n; ++e) lanes[0] += static_cast<double>(a[e]) * b[e];
  double sum = 0;
  for (int64_t c = 0; c < kLanes; ++c) sum += lanes[c];
  return static_cast<float>(sum);
}

__attribute__((target_clones("avx512f", "arch=haswell", "default"))) void scale_row(float* x,
                                                                                    int64_t n,
                                                                                    float a) {
  for (int64_t e = 0; e < n; ++e) x[e] *= a;
}

// ---------------------------------------------------------------------------------------------
// Tile geometry and masking.

void validate(const AttentionParams& p, const char* who) {
  auto fail = [&](const std::string& why) {
    throw Error(std::string(who) + ": " + why + " (T=" + std::to_string(p.T) +
                ", H=" + std::to_string(p.H) + ", D=" + std::to_string(p.D) + ", ld=" +
                std::to_string(p.ld) + ", window_blocks=" + std::to_string(p.window_blocks) +
                ", block_size=" + std::to_string(p.block_size) + ")");
  };
  if (p.T < 0 || p.H < 1 || p.D < 1) fail("need T >= 0, H >= 1 and D >= 1");
  if (p.ld < p.H * p.D) fail("ld must be at least H·D");
  if (p.window_blocks < 1 || p.block_size < 1) fail("window_blocks and block_size must be >= 1");
  if (p.T > 0 && p.doc == nullptr) fail("doc is null");
  for (int64_t t = 1; t < p.T; ++t) {
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
    throw Error(std::string(who) + ": q, k and v must all be set");
  }
}

// Window in blocks, capped so (block + W)·block_size cannot overflow; beyond T/block_size + 1
// every W means "no window".
int64_t effective_window(const AttentionParams& p) {
  return std::min(p.window_blocks, p.T / p.block_size + 2);
}

// The mask pair by pair, as the spec states it; the references use it.
bool visible(const AttentionParams& p, int64_t i, int64_t j) {
  return j <= i && p.doc[i] == p.doc[j] &&
         i / p.block_size - j / p.block_size < effective_window(p);
}

// Docs are nondecreasing, so the keys query i sees are one contiguous range [first, i]: first is
// the later of the start of its doc and the start of its window. The kernels mask by this.
int64_t first_visible(const AttentionParams& p, int64_t i) {
  const int64_t doc_start = std::lower_bound(p.doc, p.doc + i, p.doc[i]) - p.doc;
  const int64_t window_start = (i / p.block_size - effective_window(p) + 1) * p.block_size;
  return std::max(doc_start, window_start);
}

// A tile: queries [q0, q0+nq), keys [k0, k0+nk).
struct Tile {
  int64_t q0, nq, k0, nk;
};

enum class TileMask { kSkip, kFull, kPartial };

// Docs are nondecreasing, so the corner tokens decide: if the last key is in an earlier doc than
// the first query, no key's doc matches any query's; if the first key and last query share a
// doc, every token in between does too.
TileMask classify(const AttentionParams& p, const Tile& t) {
  const int64_t q1 = t.q0 + t.nq - 1, k1 = t.k0 + t.nk - 1;
  const int64_t bs = p.block_size, w = effective_window(p);
  if (t.k0 > q1 || p.doc[k1] < p.doc[t.q0] || t.q0 / bs - k1 / bs >= w) return TileMask::kSkip;
  if (k1 <= t.q0 && p.doc[t.k0] == p.doc[q1] && q1 / bs - t.k0 / bs < w) return TileMask::kFull;
  return TileMask::kPartial;
}

// Key tiles a query tile may see: from the one holding the earliest key visible to its first
// query (start of that query's doc or window) to its diagonal tile.
std::pair<int64_t, int64_t> key_tile_range(const AttentionParams& p, int64_t q0, int64_t nq) {
  return {first_visible(p, q0) / kBk, (q0 + nq - 1) / kBk};
}

// Query tiles that may see a key tile: from its diagonal to the one holding the last query that
// sees its last key (end of that key's doc or window).
std::pair<int64_t, int64_t> query_tile_range(const AttentionParams& p, int64_t k0, int64_t nk) {
  const int64_t k1 = k0 + nk - 1;
  const int64_t doc_end = std::upper_bound(p.doc, p.doc + p.T, p.doc[k1]) - p.doc;
  const int64_t window_end = (k1 / p.block_size + effective_window(p)) * p.block_size;
  const int64_t hi = std::min({p.T, doc_end, window_end});
  return {k0 / kBq, (hi - 1) / kBq};
}

// Raw scores of a tile → scaled, with hidden entries and the padding columns [nk, nkp) at -inf.
void mask_scores(const AttentionParams& p, const Tile& t, TileMask mask, float* s, int64_t nkp) {
  for (int64_t i = 0; i < t.nq; ++i) {
    float* row = s + i * kBk;
    scale_in_place(row, nkp, p.scale);
    int64_t lo = 0, hi = t.nk;  // visible columns [lo, hi)
    if (mask == TileMask::kPartial) {
      lo = std::clamp<int64_t>(first_visible(p, t.q0 + i) - t.k0, 0, t.nk);
      hi = std::clamp<int64_t>(t.q0 + i + 1 - t.k0, lo, t.nk);
    }
    std::fill(row, row + lo, kNegInf);
    std::fill(row + hi, row + nkp, kNegInf);
  }
}

// Copies n rows of one head into rows of length dp, zero-padding columns D..dp.
void pack_rows(const float* src, int64_t ld, int64_t n, int64_t d, int64_t dp, float* dst) {
  for (int64_t i = 0; i < n; ++i) {
    std::memcpy(dst + i * dp, src + i * ld, static_cast<size_t>(d) * sizeof(float));
    std::fill(dst + i * dp + d, dst + (i + 1) * dp, 0.0f);
  }
}

// Copies a tile of n ≤ kBk rows of one head transposed into [D, kBk], zero-padding columns
// n..kBk. Reads run along rows; the scattered writes land in a block that fits in L1.
void pack_transposed(const float* src, int64_t ld, int64_t n, int64_t d, float* dst) {
  for (int64_t j = 0; j < n; ++j) {
    for (int64_t e = 0; e < d; ++e) dst[e * kBk + j] = src[j * ld + e];
  }
  for (int64_t e = 0; e < d; ++e) std::fill(dst + e * kBk + n, dst + (e + 1) * kBk, 0.0f);
}

int64_t tiles(int64_t T, int64_t b) {
  return (T + b - 1) / b;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Forward, one head at a time: pack the head's kᵀ and v tiles once (so no tile is transposed
// again per visit, and the keys one query tile's window covers are still in L2 for the next),
// then one task per query tile. Its output rows live in `o` while the key tiles stream past,
// rescaled whenever a row's running max grows.

void attention_forward(const AttentionParams& p, float* out, float* lse) {
  validate_tensors(p, "attention_forward");
  if (p.T == 0) return;
  static_assert(kBq == kBk, "one tile count serves queries and keys");
  const int64_t T = p.T, H = p.H, D = p.D, dp = round_up(D, kVec), nt = tiles(T, kBk);
  std::vector<float> kt_pack(static_cast<size_t>(nt * D * kBk));
  std::vector<float> v_pack(static_cast<size_t>(nt * kBk * dp));
  struct Scratch {
    std::vector<float> q, s, o, m, l;
  };
  ThreadPool& pool = ThreadPool::current();
  std::vector<Scratch> scratch(static_cast<size_t>(pool.size()));
  for (int64_t h = 0; h < H; ++h) {
    pool.parallel_for(static_cast<size_t>(nt), [&](size_t task, int) {
      const int64_t k0 = static_cast<int64_t>(task) * kBk, nk = std::min(kBk, T - k0);
      pack_transposed(p.k + k0 * p.ld + h * D, p.ld, nk, D, kt_pack.data() + k0 * D);
      pack_rows(p.v + k0 * p.ld + h * D, p.ld, nk, D, dp, v_pack.data() + k0 * dp);
    });
    // Latest query tiles first: they see the most keys, so the tasks left at the end are small.
    pool.parallel_for(static_cast<size_t>(nt), [&](size_t task, int worker) {
      const int64_t q0 = (nt - 1 - static_cast<int64_t>(task)) * kBq;
      const int64_t nq = std::min(kBq, T - q0);
      Scratch& w = scratch[static_cast<size_t>(worker)];
      w.q.resize(static_cast<size_t>(kBq * dp));
      w.s.resize(static_cast<size_t>(kBq * kBk));
      w.o.assign(static_cast<size_t>(kBq * dp), 0.0f);
      w.m.assign(kBq, kNegInf);
      w.l.assign(kBq, 0.0f);
      pack_rows(p.q + q0 * p.ld + h * D, p.ld, nq, D, dp, w.q.data());
      const auto [kt_lo, kt_hi] = key_tile_range(p, q0, nq);
      for (int64_t kt = kt_lo; kt <= kt_hi; ++kt) {
        const Tile t{q0, nq, kt * kBk, std::min(kBk, T - kt * kBk)};
        const TileMask mask = classify(p, t);
        if (mask == TileMask::kSkip) continue;
        const int64_t nkp = round_up(t.nk, kVec);
        tile_gemm(nq, nkp, D, w.q.data(), dp, 1, kt_pack.data() + t.k0 * D, kBk, w.s.data(), kBk,
                  false);
        mask_scores(p, t, mask, w.s.data(), nkp);
        for (int64_t i = 0; i < nq; ++i) {
          float* row = w.s.data() + i * kBk;
          const float mx = row_max(row, nkp);
          if (mx == kNegInf) {  // nothing visible in this tile for this row (yet)
            std::fill(row, row + nkp, 0.0f);
            continue;
          }
          const float m_new = std::max(w.m[i], mx);
          const float alpha = exp_vec(w.m[i] - m_new);  // 0 on the first visible tile
          w.l[i] = w.l[i] * alpha + exp_shifted(row, nkp, m_new);
          w.m[i] = m_new;
          if (alpha != 1.0f) scale_row(w.o.data() + i * dp, dp, alpha);
        }
        tile_gemm(nq, dp, t.nk, w.s.data(), kBk, 1, v_pack.data() + t.k0 * dp, dp, w.o.data(), dp,
                  true);
      }
      for (int64_t i = 0; i < nq; ++i) {
        float* dst = out + (q0 + i) * H * D + h * D;
        const float inv = 1.0f / w.l[i];
        for (int64_t e = 0; e < D; ++e) dst[e] = w.o[static_cast<size_t>(i * dp + e)] * inv;
        lse[h * T + q0 + i] = w.m[i] + std::log(w.l[i]);
      }
    });
  }
}

// ---------------------------------------------------------------------------------------------
// Backward. With P = softmax rows, dP = dO·Vᵀ and Delta_i = dO_i·O_i = Σ_j P_ij dP_ij:
//   dS = scale·P∘(dP − Delta),  dV = Pᵀ·dO,  dK = dSᵀ·Q,  dQ = dS·K.
// One head at a time, after packing its q, dO, k rows and kᵀ, vᵀ tiles: pass A owns a key tile
// (dK, dV) and walks the query tiles that see it; pass B owns a query tile (dQ) and walks its key
// tiles. Both recompute P and dS, which costs FLOPs but needs no T×T storage and no atomics, and
// each output is summed in one fixed order.

namespace {

struct HeadPack {
  std::vector<float> q, dout, k, kt, vt, lse, delta;
};

struct BackwardScratch {
  std::vector<float> p, ds, acc_a, acc_b;
  void reset(int64_t dp) {
    p.resize(static_cast<size_t>(kBq * kBk));
    ds.resize(static_cast<size_t>(kBq * kBk));
    acc_a.assign(static_cast<size_t>(kBk * dp), 0.0f);
    acc_b.assign(static_cast<size_t>(kBk * dp), 0.0f);
  }
};

// P and dS of one tile into w.p and w.ds (scale folded into dS).
void tile_probs_and_grads(const AttentionParams& p, const Tile& t, TileMask mask, int64_t dp,
                          const HeadPack& pk, BackwardScratch& w) {
  const int64_t nkp = round_up(t.nk, kVec);
  tile_gemm(t.nq, nkp, p.D, pk.q.data() + t.q0 * dp, dp, 1, pk.kt.data() + t.k0 * p.D, kBk,
            w.p.data(), kBk, false);
  mask_scores(p, t, mask, w.p.data(), nkp);
  tile_gemm(t.nq, nkp, p.D, pk.dout.data() + t.q0 * dp, dp, 1, pk.vt.data() + t.k0 * p.D, kBk,
            w.ds.data(), kBk, false);
  for (int64_t i = 0; i < t.nq; ++i) {
    exp_shifted(w.p.data() + i * kBk, nkp, pk.lse[static_cast<size_t>(t.q0 + i)]);
    score_grad(w.p.data() + i * kBk, w.ds.data() + i * kBk, nkp,
               pk.delta[static_cast<size_t>(t.q0 + i)], p.scale);
  }
}

void store_rows(const float* src, int64_t dp, int64_t n, int64_t d, float* dst, int64_t ld) {
  for (int64_t i = 0; i < n; ++i) {
    std::memcpy(dst + i * ld, src + i * dp, static_cast<size_t>(d) * sizeof(float));
  }
}

}  // namespace

void attention_backward(const AttentionParams& p, const float* out, const float* lse,
                        const float* dout, float* dq, float* dk, float* dv) {
  validate_tensors(p, "attention_backward");
  if (p.T == 0) return;
  const int64_t T = p.T, H = p.H, D = p.D, dp = round_up(D, kVec), nt = tiles(T, kBk);
  const int64_t hd = H * D;
  HeadPack pk;
  pk.q.resize(static_cast<size_t>(nt * kBk * dp));
  pk.dout.resize(pk.q.size());
  pk.k.resize(pk.q.size());
  pk.kt.resize(static_cast<size_t>(nt * D * kBk));
  pk.vt.resize(pk.kt.size());
  pk.delta.resize(static_cast<size_t>(T));
  ThreadPool& pool = ThreadPool::current();
  std::vector<BackwardScratch> scratch(static_cast<size_t>(pool.size()));

  for (int64_t h = 0; h < H; ++h) {
    pk.lse.assign(lse + h * T, lse + (h + 1) * T);
    pool.parallel_for(static_cast<size_t>(nt), [&](size_t task, int) {
      const int64_t t0 = static_cast<int64_t>(task) * kBk, n = std::min(kBk, T - t0);
      pack_rows(p.q + t0 * p.ld + h * D, p.ld, n, D, dp, pk.q.data() + t0 * dp);
      pack_rows(dout + t0 * hd + h * D, hd, n, D, dp, pk.dout.data() + t0 * dp);
      pack_rows(p.k + t0 * p.ld + h * D, p.ld, n, D, dp, pk.k.data() + t0 * dp);
      pack_transposed(p.k + t0 * p.ld + h * D, p.ld, n, D, pk.kt.data() + t0 * D);
      pack_transposed(p.v + t0 * p.ld + h * D, p.ld, n, D, pk.vt.data() + t0 * D);
      for (int64_t i = t0; i < t0 + n; ++i) {
        pk.delta[static_cast<size_t>(i)] =
            dot_double(dout + i * hd + h * D, out + i * hd + h * D, D);
      }
    });

    // Pass A: dK and dV, one task per key tile; early key tiles see the most queries.
    pool.parallel_for(static_cast<size_t>(nt), [&](size_t task, int worker) {
      const int64_t k0 = static_cast<int64_t>(task) * kBk, nk = std::min(kBk, T - k0);
      BackwardScratch& w = scratch[static_cast<size_t>(worker)];
      w.reset(dp);
      const auto [qt_lo, qt_hi] = query_tile_range(p, k0, nk);
      for (int64_t qt = qt_lo; qt <= qt_hi; ++qt) {
        const Tile t{qt * kBq, std::min(kBq, T - qt * kBq), k0, nk};
        const TileMask mask = classify(p, t);
        if (mask == TileMask::kSkip) continue;
        tile_probs_and_grads(p, t, mask, dp, pk, w);
        // Pᵀ and dSᵀ read in place (ars = 1, acs = kBk): rows are keys, the sum runs over
        // queries.
        tile_gemm(nk, dp, t.nq, w.p.data(), 1, kBk, pk.dout.data() + t.q0 * dp, dp, w.acc_b.data(),
                  dp, true);
        tile_gemm(nk, dp, t.nq, w.ds.data(), 1, kBk, pk.q.data() + t.q0 * dp, dp, w.acc_a.data(),
                  dp, true);
      }
      store_rows(w.acc_a.data(), dp, nk, D, dk + k0 * p.ld + h * D, p.ld);
      store_rows(w.acc_b.data(), dp, nk, D, dv + k0 * p.ld + h * D, p.ld);
    });

    // Pass B: dQ, one task per query tile; late query tiles see the most keys.
    pool.parallel_for(static_cast<size_t>(nt), [&](size_t task, int worker) {
      const int64_t q0 = (nt - 1 - static_cast<int64_t>(task)) * kBq;
      const int64_t nq = std::min(kBq, T - q0);
      BackwardScratch& w = scratch[static_cast<size_t>(worker)];
      w.reset(dp);
      const auto [kt_lo, kt_hi] = key_tile_range(p, q0, nq);
      for (int64_t kt = kt_lo; kt <= kt_hi; ++kt) {
        const Tile t{q0, nq, kt * kBk, std::min(kBk, T - kt * kBk)};
        const TileMask mask = classify(p, t);
        if (mask == TileMask::kSkip) continue;
        tile_probs_and_grads(p, t, mask, dp, pk, w);
        tile_gemm(nq, dp, t.nk, w.ds.data(), kBk, 1, pk.k.data() + t.k0 * dp, dp, w.acc_a.data(),
                  dp, true);
      }
      store_rows(w.acc_a.data(), dp, nq, D, dq + q0 * p.ld + h * D, p.ld);
    });
  }
}

double attention_visited_fraction(const AttentionParams& p) {
  validate(p, "attention_visited_fraction");
  if (p.T == 0) return 0.0;
  const int64_t nqt = tiles(p.T, kBq), nkt = tiles(p.T, kBk);
  int64_t visited = 0;
  for (int64_t qt = 0; qt < nqt; ++qt) {
    const int64_t q0 = qt * kBq, nq = std::min(kBq, p.T - q0);
    const auto [kt_lo, kt_hi] = key_tile_range(p, q0, nq);
    for (int64_t kt = kt_lo; kt <= kt_hi; ++kt) {
      const Tile t{q0, nq, kt * kBk, std::min(kBk, p.T - kt * kBk)};
      if (classify(p, t) != TileMask::kSkip) ++visited;
    }
  }
  return static_cast<double>(visited) / static_cast<double>(nqt * nkt);
}

// ---------------------------------------------------------------------------------------------
// References: every (query, key) pair, scores in double, no tiling and no skipping.

namespace {

// Scaled scores of query i against every key, in double; hidden keys get -inf.
void reference_scores(const AttentionParams& p, int64_t h, int64_t i, std::vector<double>& s) {
  s.assign(static_cast<size_t>(p.T), -std::numeric_limits<double>::infinity());
  const float* qi = p.q + i * p.ld + h * p.D;
  for (int64_t j = 0; j <= i; ++j) {
    if (!visible(p, i, j)) continue;
    const float* kj = p.k + j * p.ld + h * p.D;
    double dot = 0;
    for (int64_t e = 0; e < p.D; ++e) dot += static_cast<double>(qi[e]) * kj[e];
    s[static_cast<size_t>(j)] = static_cast<double>(p.scale) * dot;
  }
}

// Turns the scores of query i into probabilities in place; returns the log-sum-exp.
double reference_softmax(int64_t i, std::vector<double>& s) {
  double m = -std::numeric_limits<double>::infinity();
  for (int64_t j = 0; j <= i; ++j) m = std::max(m, s[static_cast<size_t>(j)]);
  double sum = 0;
  for (int64_t j = 0; j <= i; ++j) sum += std::exp(s[static_cast<size_t>(j)] - m);
  for (int64_t j = 0; j <= i; ++j) {
    s[static_cast<size_t>(j)] = std::exp(s[static_cast<size_t>(j)] - m) / sum;
  }
  return m + std::log(sum);
}

}  // namespace

void attention_forward_reference(const AttentionParams& p, float* out, float* lse) {
  validate_tensors(p, "attention_forward_reference");
  const int64_t hd = p.H * p.D;
  std::vector<double> s, o(static_cast<size_t>(p.D));
  for (int64_t h = 0; h < p.H; ++h) {
    for (int64_t i = 0; i < p.T; ++i) {
      reference_scores(p, h, i, s);
      lse[h * p.T + i] = static_cast<float>(reference_softmax(i, s));
      std::fill(o.begin(), o.end(), 0.0);
      for (int64_t j = 0; j <= i; ++j) {
        const double pij = s[static_cast<size_t>(j)];
        if (pij == 0) continue;
        const float* vj = p.v + j * p.ld + h * p.D;
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
  validate_tensors(p, "attention_backward_reference");
  const int64_t T = p.T, D = p.D, hd = p.H * p.D;
  const double scale = p.scale;
  std::vector<double> s, dp(static_cast<size_t>(T));
  std::vector<double> gq(static_cast<size_t>(T * D)), gk(gq.size()), gv(gq.size());
  for (int64_t h = 0; h < p.H; ++h) {
    std::fill(gq.begin(), gq.end(), 0.0);
    std::fill(gk.begin(), gk.end(), 0.0);
    std::fill(gv.begin(), gv.end(), 0.0);
    for (int64_t i = 0; i < T; ++i) {
      reference_scores(p, h, i, s);
      reference_softmax(i, s);
      const float* doi = dout + i * hd + h * D;
      // Delta from P and dP, not from the forward output, so this path shares nothing with the
      // kernel's dO·O.
      double delta = 0;
      for (int64_t j = 0; j <= i; ++j) {
        double d = 0;
        if (s[static_cast<size_t>(j)] != 0) {
          const float* vj = p.v + j * p.ld + h * D;
          for (int64_t e = 0; e < D; ++e) d += static_cast<double>(doi[e]) * vj[e];
        }
        dp[static_cast<size_t>(j)] = d;
        delta += s[static_cast<size_t>(j)] * d;
      }
      const float* qi = p.q + i * p.ld + h * D;
      for (int64_t j = 0; j <= i; ++j) {
        const double pij = s[static_cast<size_t>(j)];
        if (pij == 0) continue;
        const double ds = scale * pij * (dp[static_cast<size_t>(j)] - delta);
        const float* kj = p.k + j * p.ld + h * D;
        for (int64_t e = 0; e < D; ++e) {
          gq[static_cast<size_t>(i * D + e)] += ds * kj[e];
          gk[static_cast<size_t>(j * D + e)] += ds * qi[e];
          gv[static_cast<size_t>(j * D + e)] += pij * doi[e];
        }
      }
    }
    for (int64_t t = 0; t < T; ++t) {
      for (int64_t e = 0; e < D; ++e) {
        const size_t idx = static_cast<size_t>(t * D + e);
        dq[t * p.ld + h * D + e] = static_cast<float>(gq[idx]);
        dk[t * p.ld + h * D + e] = static_cast<float>(gk[idx]);
        dv[t * p.ld + h * D + e] = static_cast<float>(gv[idx]);
      }
    }
  }
}

}  // namespace nanogpt
