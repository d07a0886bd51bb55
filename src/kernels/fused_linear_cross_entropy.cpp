#include "kernels/fused_linear_cross_entropy.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "kernels/exp_approx.hpp"
#include "kernels/fp8.hpp"
#include "kernels/gemm.hpp"
#include "kernels/loss_rows_avx512.hpp"
#include "kernels/target.hpp"
#include "runtime/aligned_memory.hpp"
#include "runtime/error.hpp"
#include "runtime/integer_math.hpp"
#include "runtime/thread_pool.hpp"
#include "runtime/workspace.hpp"

// The row loops below are compiled once per ISA, as the GEMM's micro-kernel is: the library is
// built without -march, and these loops (two or three exps per logit) are the only work besides
// the GEMM.
#define NANOGPT_ROW_KERNEL NANOGPT_TARGET_CLONES

namespace nanogpt {

namespace {

// Rows per parallel task in the elementwise passes: a task is then 8 × V logits, two or three
// exponentials each, tens of microseconds or more, well above the cost of handing it out.
constexpr int64_t kRowsPerTask = 8;
// A row's Σ exp(y - m) is summed in float lanes over segments of this many classes and the
// segments' sums are added in double, so the rounding error does not grow with V.
constexpr int64_t kSumSegment = 1024;
// Independent partial sums per row: enough for one AVX-512 vector, and a fixed association
// order, so the sum is the same whichever clone runs.
constexpr int kLanes = 16;
// Elements per task when rounding a matrix to FP8.
constexpr int64_t kQuantizeTaskElements = int64_t{1} << 16;

// Everything the kernels need, with the defaults filled in.
struct Config {
  int64_t T, d, V, rows, ld;  // rows: the row block; ld: the workspace's row stride
  int64_t logit_rows;         // rows of logits held at once (at most rows)
  bool capped;
  // With the cap, softcap here is the cap divided by the temperature: (cap/τ)·σ(z/divisor) is
  // y/τ, so every pass of the loss sees the tempered logits with no extra multiply.
  float softcap, inv_divisor;
  float inv_temperature;  // 1/τ; without the cap the rows are scaled by it
  bool fp8;
  bool avx512_rows;  // the row loops of kernels/loss_rows_avx512.hpp (not with FP8's gradient)
  float x_scale, w_scale, grad_scale;
  float loss_scale;
  const float* row_weights;  // [T] or null (all 1)
  float* entropy;            // [T] or null
};

// The workspace's row stride in floats: V rounded up to whole 64-byte lines, and to an odd
// number of them. The dW product reads the workspace down its columns; with a power-of-two
// stride (V = 8192 is 32 KiB) those reads all fall in a few cache sets and evict each other.
int64_t workspace_ld(int64_t V) {
  constexpr int64_t kLine = 16;  // floats per 64-byte line
  int64_t ld = (V + kLine - 1) / kLine * kLine;
  if ((ld / kLine) % 2 == 0) ld += kLine;
  return ld;
}

std::string shape_string(const FusedLossParams& p) {
  return "(T=" + std::to_string(p.T) + ", d=" + std::to_string(p.d) + ", V=" + std::to_string(p.V) +
         ")";
}

Config resolve(const FusedLossParams& p, bool need_targets) {
  const std::string where = "fused linear cross-entropy " + shape_string(p) + ": ";
  if (p.T < 0 || p.d <= 0 || p.V <= 0) {
    throw Error(where + "needs T >= 0, d > 0 and V > 0");
  }
  if (p.T > 0 && (p.x == nullptr || p.W == nullptr || (need_targets && p.targets == nullptr))) {
    throw Error(where + "x, W" + (need_targets ? " and targets" : "") + " must not be null");
  }
  if (p.V > std::numeric_limits<int32_t>::max()) {
    throw Error(where + "V does not fit the int32 targets");
  }
  if (!(p.softcap >= 0.0f) || !(p.softcap_divisor >= 0.0f) || !std::isfinite(p.softcap) ||
      !std::isfinite(p.softcap_divisor)) {
    throw Error(where + "softcap and softcap_divisor must be finite and >= 0 (0 = off / default)");
  }
  if (p.fp8 &&
      (!(p.x_scale >= 0.0f) || !(p.w_scale > 0.0f) || !(p.grad_scale > 0.0f) ||
       !std::isfinite(p.x_scale) || !std::isfinite(p.w_scale) || !std::isfinite(p.grad_scale))) {
    throw Error(where + "the FP8 scales must be finite and > 0 (x_scale 0 = √d/448)");
  }
  if (!std::isfinite(p.loss_scale)) throw Error(where + "loss_scale must be finite");
  if (!(p.temperature > 0.0f) || !std::isfinite(p.temperature)) {
    throw Error(where + "temperature must be finite and > 0 (1 = the plain loss), not " +
                std::to_string(p.temperature));
  }
  if (p.row_weights != nullptr) {
    for (int64_t t = 0; t < p.T; ++t) {
      if (!std::isfinite(p.row_weights[t])) {
        throw Error(where + "row_weights[" + std::to_string(t) + "] is not finite");
      }
    }
  }
  if (p.row_block < 0 || p.logit_rows < 0) {
    throw Error(where + "row_block and logit_rows must be >= 0 (0 = default)");
  }
  if (p.W_packed != nullptr &&
      (p.W_packed->K != p.d || p.W_packed->N != p.V ||
       (p.W_packed->source == PackSource::kF32) != (p.precision == Precision::kFp32))) {
    throw Error(where + "W_packed holds a " + std::to_string(p.W_packed->K) + "×" +
                std::to_string(p.W_packed->N) + " operand packed for " +
                (p.W_packed->source == PackSource::kF32 ? "fp32" : "bf16") +
                " products; pack W (d × V, as Wᵀ) for this precision");
  }
  if (need_targets) {
    for (int64_t t = 0; t < p.T; ++t) {
      if (p.targets[t] < 0 || p.targets[t] >= p.V) {
        throw Error(where + "targets[" + std::to_string(t) + "] = " + std::to_string(p.targets[t]) +
                    " is not a class in [0, V); check the data " +
                    "was tokenized with this vocabulary");
      }
    }
  }
  Config c{};
  c.T = p.T;
  c.d = p.d;
  c.V = p.V;
  c.ld = workspace_ld(p.V);
  c.rows = std::max<int64_t>(1, fused_linear_cross_entropy_row_block(p));
  c.logit_rows = std::max<int64_t>(1, fused_linear_cross_entropy_logit_rows(p));
  c.capped = p.softcap > 0.0f;
  // 1/τ as a float, then the cap times it: exactly the cap when τ = 1.
  c.inv_temperature = 1.0f / p.temperature;
  c.softcap = p.softcap * c.inv_temperature;
  const float divisor = p.softcap_divisor > 0.0f
                            ? p.softcap_divisor
                            : static_cast<float>(7.5 * std::sqrt(static_cast<double>(p.d)));
  // Multiplying by the reciprocal is what torch does for `logits / python_float`.
  c.inv_divisor = 1.0f / divisor;
  c.fp8 = p.fp8;
  c.avx512_rows = loss_rows_avx512();
  c.x_scale = p.x_scale > 0.0f ? p.x_scale
                               : static_cast<float>(std::sqrt(static_cast<double>(p.d)) / 448.0);
  c.w_scale = p.w_scale;
  c.grad_scale = p.grad_scale;
  c.loss_scale = p.loss_scale;
  c.row_weights = p.row_weights;
  c.entropy = p.entropy;
  return c;
}

// The packed W the logits use: the caller's, unless W is rounded to fp8 first.
const PackedB* packed_weights(const FusedLossParams& p, const Config& c) {
  return c.fp8 ? nullptr : p.W_packed;
}

// ---- elementwise math -------------------------------------------------------------------------

// Soft-capped logits from z, for capped_logits: σ(u) = 1/(1+e) with e = exp(-u), the
// expressions the loss computes y with (exp_neg_scaled_row, then logit_of).
NANOGPT_ROW_KERNEL void soft_cap_row(const float* z, float* y, int64_t n, float softcap,
                                     float inv_divisor) {
  for (int64_t j = 0; j < n; ++j) {
    const float e = exp_approx(-(z[j] * inv_divisor));
    const float sigma = 1.0f / (1.0f + e);
    y[j] = softcap * sigma;
  }
}

// GCC's vectorizer leaves a float max reduction scalar (it would reorder NaN comparisons), so
// the lanes are spelled out as a GCC vector, which each clone lowers to its own registers.
using FloatLanes = float __attribute__((vector_size(kLanes * sizeof(float))));

NANOGPT_ROW_KERNEL float max_row(const float* y, int64_t n) {
  float m = -std::numeric_limits<float>::infinity();
  int64_t j = 0;
  if (n >= kLanes) {
    FloatLanes lanes;
    std::memcpy(&lanes, y, sizeof(lanes));
    for (j = kLanes; j + kLanes <= n; j += kLanes) {
      FloatLanes v;
      std::memcpy(&v, y + j, sizeof(v));
      lanes = lanes < v ? v : lanes;
    }
    for (int l = 0; l < kLanes; ++l) m = m < lanes[l] ? lanes[l] : m;
  }
  for (; j < n; ++j) m = m < y[j] ? y[j] : m;
  return m;
}

NANOGPT_ROW_KERNEL float min_row(const float* v, int64_t n) {
  float m = std::numeric_limits<float>::infinity();
  int64_t j = 0;
  if (n >= kLanes) {
    FloatLanes lanes;
    std::memcpy(&lanes, v, sizeof(lanes));
    for (j = kLanes; j + kLanes <= n; j += kLanes) {
      FloatLanes w;
      std::memcpy(&w, v + j, sizeof(w));
      lanes = w < lanes ? w : lanes;
    }
    for (int l = 0; l < kLanes; ++l) m = lanes[l] < m ? lanes[l] : m;
  }
  for (; j < n; ++j) m = v[j] < m ? v[j] : m;
  return m;
}

// With the soft-cap, a row of the workspace holds e = exp(-z/divisor) instead of z: σ =
// 1/(1+e), y = softcap·σ and dy/dz = softcap/divisor·(e·σ)·σ all follow from it without
// another exp, and without the cancellation of 1-σ when σ is near 1.
NANOGPT_ROW_KERNEL void exp_neg_scaled_row(float* v, int64_t n, float inv_divisor) {
  for (int64_t j = 0; j < n; ++j) v[j] = exp_approx(-(v[j] * inv_divisor));
}

// y from what a row holds: softcap·σ from e with the cap, else z itself. Every pass (and the
// scalar code for the target and the max) computes y with this one expression, so all see the
// same y bit for bit.
template <bool kCapped>
__attribute__((always_inline)) inline float logit_of(float v, float softcap) {
  if constexpr (kCapped) {
    return softcap * (1.0f / (1.0f + v));
  } else {
    return v;
  }
}

// What the sum pass keeps of a row for the gradient pass, so that pass computes no exponential
// and no division: q_j = exp(y_j - m) and, with the cap, dy_j/dz_j = slope·(e_j·σ_j)·σ_j (slope
// = softcap/divisor); without it the slope is 1/τ for every j. Each is the value the gradient
// would compute from the row again, bit for bit. Two rows of V floats per thread.
struct KeptRow {
  float* q = nullptr;
  float* dydz = nullptr;
};

// Σ_j exp(y_j - m), in kLanes partial sums combined pairwise; with kKeep, keeping the above.
template <bool kCapped, bool kKeep>
__attribute__((always_inline)) inline float sum_exp_loop(const float* v, int64_t n, float m,
                                                         float softcap, float slope, KeptRow keep) {
  float lanes[kLanes] = {};
  auto term = [&](int64_t j) {
    const float e = v[j];
    const float q = exp_approx(logit_of<kCapped>(e, softcap) - m);
    if constexpr (kKeep) {
      keep.q[j] = q;
      if constexpr (kCapped) {
        const float sigma = 1.0f / (1.0f + e);
        keep.dydz[j] = slope * (e * sigma) * sigma;
      }
    }
    return q;
  };
  int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes) {
    for (int l = 0; l < kLanes; ++l) lanes[l] += term(j + l);
  }
  for (int l = 0; j < n; ++j, ++l) lanes[l] += term(j);
  for (int width = kLanes / 2; width > 0; width /= 2) {
    for (int l = 0; l < width; ++l) lanes[l] += lanes[l + width];
  }
  return lanes[0];
}

NANOGPT_ROW_KERNEL float sum_exp_row(const float* v, int64_t n, float m, bool capped, float softcap,
                                     float slope, KeptRow keep) {
  if (keep.q == nullptr) {
    return capped ? sum_exp_loop<true, false>(v, n, m, softcap, slope, keep)
                  : sum_exp_loop<false, false>(v, n, m, softcap, slope, keep);
  }
  return capped ? sum_exp_loop<true, true>(v, n, m, softcap, slope, keep)
                : sum_exp_loop<false, true>(v, n, m, softcap, slope, keep);
}

struct GradRowArgs {
  bool capped;
  float inv_s;  // 1 / Σ exp(y - m): p = q·inv_s
  bool fp8;
  float grad_scale, inv_grad_scale;
  float uncapped_slope;  // dy/dz without the cap: 1/τ
  float weight;          // the row's weight w_t
};

// g_j = dloss/dz_j = (p_j - [j == target])·dy_j/dz_j for the row's own loss, rounded to E5M2
// (after dividing by grad_scale) in FP8 mode, from what the sum pass kept of the row, into g
// as fp32 or rounded to bf16 (what the bf16 products would round it to as they pack it:
// storing it so halves what they read).
// The flags are template parameters so that each variant is one straight loop to vectorize.
template <bool kCapped, bool kFp8>
__attribute__((always_inline)) inline void grad_row_loop(KeptRow kept, float* g, int64_t n,
                                                         int64_t target, const GradRowArgs a) {
  for (int64_t j = 0; j < n; ++j) {
    const float dydz = kCapped ? kept.dydz[j] : a.uncapped_slope;
    const float p = kept.q[j] * a.inv_s;
    // (A weight of 1 multiplies exactly: the plain loss's bits.)
    float gj = (p - (j == target ? 1.0f : 0.0f)) * dydz * a.weight;
    if constexpr (kFp8) gj = round_to_e5m2(gj * a.inv_grad_scale) * a.grad_scale;
    g[j] = gj;
  }
}

__attribute__((always_inline)) inline void grad_row_any(KeptRow kept, float* g, int64_t n,
                                                        int64_t target, const GradRowArgs& args) {
  if (args.capped) {
    if (args.fp8) {
      grad_row_loop<true, true>(kept, g, n, target, args);
    } else {
      grad_row_loop<true, false>(kept, g, n, target, args);
    }
  } else if (args.fp8) {
    grad_row_loop<false, true>(kept, g, n, target, args);
  } else {
    grad_row_loop<false, false>(kept, g, n, target, args);
  }
}

NANOGPT_ROW_KERNEL void grad_row(KeptRow kept, float* g, int64_t n, int64_t target,
                                 const GradRowArgs& args) {
  grad_row_any(kept, g, n, target, args);
}

// The same rounded to bf16, a chunk at a time through fp32: GCC vectorizes the fp32 loop and
// the conversion apart, not fused (the narrowing store kept it scalar, 3x slower).
NANOGPT_ROW_KERNEL void grad_row(KeptRow kept, bf16* g, int64_t n, int64_t target,
                                 const GradRowArgs& args) {
  constexpr int64_t kChunk = 512;
  alignas(64) float chunk[kChunk];
  uint16_t* bits = reinterpret_cast<uint16_t*>(g);
  for (int64_t j0 = 0; j0 < n; j0 += kChunk) {
    const int64_t len = std::min(kChunk, n - j0);
    const KeptRow part{kept.q + j0, kept.dydz == nullptr ? nullptr : kept.dydz + j0};
    grad_row_any(part, chunk, len, target - j0, args);
    for (int64_t j = 0; j < len; ++j) bits[j0 + j] = to_bf16_bits(chunk[j]);
  }
}

NANOGPT_ROW_KERNEL void round_e4m3_scaled(const float* src, float* dst, int64_t n, float inv_scale,
                                          float scale) {
  for (int64_t i = 0; i < n; ++i) dst[i] = round_to_e4m3(src[i] * inv_scale) * scale;
}

// dst = round_to_e4m3(src·(1/scale))·scale: the values the FP8 matmul multiplies.
void round_e4m3_matrix(const float* src, float* dst, int64_t n, float scale) {
  const float inv_scale = 1.0f / scale;
  const int64_t tasks = (n + kQuantizeTaskElements - 1) / kQuantizeTaskElements;
  ThreadPool::current().parallel_for(static_cast<size_t>(tasks), [&](size_t task, int) {
    const int64_t i0 = static_cast<int64_t>(task) * kQuantizeTaskElements;
    const int64_t len = std::min(kQuantizeTaskElements, n - i0);
    round_e4m3_scaled(src + i0, dst + i0, len, inv_scale, scale);
  });
}

// fn(row, worker) for every row, kRowsPerTask rows per task.
template <class Fn>
void parallel_rows(int64_t rows, Fn&& fn) {
  const int64_t tasks = (rows + kRowsPerTask - 1) / kRowsPerTask;
  ThreadPool::current().parallel_for(static_cast<size_t>(tasks), [&](size_t task, int worker) {
    const int64_t begin = static_cast<int64_t>(task) * kRowsPerTask;
    const int64_t end = std::min(rows, begin + kRowsPerTask);
    for (int64_t i = begin; i < end; ++i) fn(i, worker);
  });
}

// ---- one row, whole -----------------------------------------------------------------------

struct RowLoss {
  double loss;  // logsumexp(y) - y[target]
  GradRowArgs grad;
};

// The loss of one row of logits z[0, V), turning the row into e = exp(-z/divisor) in place with
// the soft-cap (z left as is without), and, given `keep` (two rows of V floats), keeping in it
// what grad_row reads. Both the fused calls and the unfused one go through here, so all return
// the same losses.
RowLoss row_loss(float* v, int64_t t, int64_t target, const Config& c, KeptRow keep = {}) {
  const int64_t n = c.V;
  float m;
  if (!c.capped && c.inv_temperature != 1.0f) {
    for (int64_t j = 0; j < n; ++j) v[j] *= c.inv_temperature;
  }
  if (c.capped) {
    if (c.avx512_rows) {
      exp_neg_scaled_row_avx512(v, n, c.inv_divisor);
    } else {
      exp_neg_scaled_row(v, n, c.inv_divisor);
    }
    // y = softcap/(1+e) falls as e rises, and rounding keeps that order: the largest y is the
    // smallest e's. (A NaN is skipped here but reaches the sum, so the loss is NaN.)
    m = logit_of<true>(min_row(v, n), c.softcap);
  } else {
    m = max_row(v, n);
  }
  const float slope = c.softcap * c.inv_divisor;
  double s = 0.0;
  for (int64_t j0 = 0; j0 < n; j0 += kSumSegment) {
    const KeptRow part = keep.q == nullptr ? keep : KeptRow{keep.q + j0, keep.dydz + j0};
    const int64_t len = std::min(kSumSegment, n - j0);
    s += c.avx512_rows
             ? sum_exp_row_avx512(v + j0, len, m, c.capped, c.softcap, slope, part.q, part.dydz)
             : sum_exp_row(v + j0, len, m, c.capped, c.softcap, slope, part);
  }
  const float y_target =
      c.capped ? logit_of<true>(v[target], c.softcap) : logit_of<false>(v[target], c.softcap);
  RowLoss r;
  r.loss = static_cast<double>(m) + std::log(s) - static_cast<double>(y_target);
  r.grad = GradRowArgs{c.capped,
                       static_cast<float>(1.0 / s),
                       c.fp8,
                       c.grad_scale,
                       1.0f / c.grad_scale,
                       c.inv_temperature,
                       c.row_weights != nullptr ? c.row_weights[t] : 1.0f};
  if (c.entropy != nullptr) {
    // H = logsumexp(y) - Σ_j p_j·y_j = log s + Σ_j p_j·(m - y_j), with p_j = exp(y_j - m)/s:
    // the second form adds non-negative terms, where the first subtracts two numbers of the
    // logits' size (up to cap/τ) to get one of log V's.
    double weighted = 0.0;
    for (int64_t j = 0; j < n; ++j) {
      const float y = c.capped ? logit_of<true>(v[j], c.softcap) : logit_of<false>(v[j], c.softcap);
      weighted += static_cast<double>(exp_approx(y - m)) * static_cast<double>(m - y);
    }
    c.entropy[t] = static_cast<float>(std::log(s) + weighted / s);
  }
  return r;
}

// ---- the fused head -------------------------------------------------------------------------

// The logits and gradient workspaces are kept in the caller's Workspace (runtime/workspace.hpp)
// from one call to the next: allocating them per call (up to kMaxGradientBlockBytes) cost a page
// fault and the kernel's zeroing of every page, each call (5% of a T = 4096, V = 8192 call). It is
// a buffer of its own rather than a cache of aligned operator new, which glibc did not reuse (the
// process grew 37, 69, 133 MiB after 1, 5, 17 calls).
float* logits_workspace(int64_t floats) {
  return Workspace::current().get<float>("fused_loss.logits", static_cast<size_t>(floats));
}

// The rows' gradients, [rows, ld]: bf16 with bf16 products (what they would round them to as
// they pack them: storing them so halves what they read), else fp32; kept the same way.
template <class G>
G* gradient_workspace(int64_t values) {
  return Workspace::current().get<G>(
      std::is_same_v<G, bf16> ? "fused_loss.gradient_bf16" : "fused_loss.gradient",
      static_cast<size_t>(values));
}

// Per pool worker, the two rows the sum pass keeps for the gradient pass (KeptRow), V floats
// each; taken on the calling thread (runtime/workspace.hpp), kept the same way.
class KeptRows {
 public:
  explicit KeptRows(int64_t V)
      : V_(V),
        lanes_(Workspace::current().lanes("fused_loss.kept_rows", ThreadPool::current().size(),
                                          static_cast<size_t>(2 * V) * sizeof(float))) {}
  KeptRow of(int worker) const {
    float* base = reinterpret_cast<float*>(lanes_[static_cast<size_t>(worker)]);
    return KeptRow{base, base + V_};
  }

 private:
  int64_t V_;
  std::span<std::byte* const> lanes_;
};

class FusedHead {
 public:
  FusedHead(const Config& c, const FusedLossParams& p, bool grads)
      : c_(c),
        p_(p),
        weights_(p.W),
        logit_rows_(c.logit_rows),
        // Uninitialized: the logits GEMM writes every element before anything reads it.
        logits_(logits_workspace(c.logit_rows * c.ld)),
        loss_(static_cast<size_t>(c.rows)),
        buffers_(p.buffers != nullptr ? *p.buffers : own_buffers_) {
    if (c.fp8) {
      // Not zeroed: every element is written before it is read (zeroing the speedrun head's
      // 154 MB copy cost a pass over it per call).
      float* w = static_cast<float*>(
          buffers_.w_e4m3.reserve(static_cast<size_t>(c.V * c.d) * sizeof(float)));
      round_e4m3_matrix(p.W, w, c.V * c.d, c.w_scale);
      weights_ = w;
      buffers_.x_e4m3.reserve(static_cast<size_t>(c.rows * c.d) * sizeof(float));
    }
    packed_ = packed_weights(p, c);
    if (packed_ == nullptr) {
      pack_matmul_b(p.precision, Trans::kYes, c.d, c.V, weights_, c.d, buffers_.logits_w);
      packed_ = &buffers_.logits_w;
    }
    // Blocks shorter than the gradient block: whole tiles of the kernel W was packed for,
    // unless the caller chose the rows.
    const int64_t mr = packed_->kernel->mr;
    if (p.logit_rows == 0 && logit_rows_ < c.rows && logit_rows_ > mr) {
      logit_rows_ -= logit_rows_ % mr;
    }
    if (grads) {
      kept_.emplace(c.V);
      if (p.precision == Precision::kBf16) {
        grad16_ = gradient_workspace<bf16>(c.rows * c.ld);
      } else {
        grad32_ = gradient_workspace<float>(c.rows * c.ld);
      }
    }
  }

  // Runs the row blocks in order: for each block of the logits' rows, the logits, the rows'
  // losses (and gradients, if wanted, into the gradient block); then dx and dW from the
  // gradient block. Returns Σ loss_t.
  double run(float* per_token, float* dx, float* dW) {
    const bool grads = dx != nullptr || dW != nullptr;
    // dx = g·W reads all of W in every row block. Over several blocks, W is packed for it once
    // here rather than once per block inside each product (the speedrun head: 7 blocks of
    // 1,171 rows, W 50,304 × 768; a block's dx took 92.6–99.5 ms packing W, 59.7–64.3 ms
    // with it packed). The packed copy gives the product's bits (kernels/gemm/packed_b.hpp).
    const PackedB* dx_weights = nullptr;
    if (dx != nullptr && c_.rows < c_.T) {
      pack_matmul_b(p_.precision, Trans::kNo, c_.V, c_.d, weights_, c_.d, buffers_.dx_w);
      dx_weights = &buffers_.dx_w;
    }
    double total = 0.0;
    for (int64_t r0 = 0; r0 < c_.T; r0 += c_.rows) {
      const int64_t rows = std::min(c_.rows, c_.T - r0);
      const float* xb = block_inputs(r0, rows);
      for (int64_t s0 = 0; s0 < rows; s0 += logit_rows_) {
        logits_and_losses(r0, s0, std::min(logit_rows_, rows - s0), xb, grads);
      }
      for (int64_t i = 0; i < rows; ++i) {
        const double loss = loss_[static_cast<size_t>(i)];
        if (per_token != nullptr) per_token[r0 + i] = static_cast<float>(loss);
        total +=
            c_.row_weights != nullptr ? static_cast<double>(c_.row_weights[r0 + i]) * loss : loss;
      }
      // loss_scale multiplies the fp32 products, after the gradient was rounded unscaled.
      if (dx_weights != nullptr) {
        if (grad16_ != nullptr) {
          matmul(Trans::kNo, rows, c_.loss_scale, grad16_, c_.ld, *dx_weights, 0.0f, dx + r0 * c_.d,
                 c_.d);
        } else {
          matmul(Trans::kNo, rows, c_.loss_scale, grad32_, c_.ld, *dx_weights, 0.0f, dx + r0 * c_.d,
                 c_.d);
        }
      } else if (dx != nullptr) {
        if (grad16_ != nullptr) {
          gemm_bf16(Trans::kNo, Trans::kNo, rows, c_.d, c_.V, c_.loss_scale, grad16_, c_.ld,
                    weights_, c_.d, 0.0f, dx + r0 * c_.d, c_.d);
        } else {
          matmul(p_.precision, Trans::kNo, Trans::kNo, rows, c_.d, c_.V, c_.loss_scale, grad32_,
                 c_.ld, weights_, c_.d, 0.0f, dx + r0 * c_.d, c_.d);
        }
      }
      if (dW != nullptr) {
        if (grad16_ != nullptr) {
          gemm_bf16(Trans::kYes, Trans::kNo, c_.V, c_.d, rows, c_.loss_scale, grad16_, c_.ld, xb,
                    c_.d, 1.0f, dW, c_.d);
        } else {
          matmul(p_.precision, Trans::kYes, Trans::kNo, c_.V, c_.d, rows, c_.loss_scale, grad32_,
                 c_.ld, xb, c_.d, 1.0f, dW, c_.d);
        }
      }
    }
    return total;
  }

 private:
  // Rows [s0, s0 + rows) of the block at r0: their logits into the logits workspace, then each
  // row's loss into loss_ and, with grads, its gradient into the block's gradient rows.
  void logits_and_losses(int64_t r0, int64_t s0, int64_t rows, const float* xb, bool grads) {
    float* const z = logits_;
    matmul(Trans::kNo, rows, 1.0f, xb + s0 * c_.d, c_.d, *packed_, 0.0f, z, c_.ld);
    parallel_rows(rows, [&](int64_t i, int worker) {
      float* row = z + i * c_.ld;
      const int64_t b = s0 + i;  // the row in the block
      const int64_t target = p_.targets[r0 + b];
      const KeptRow kept = grads ? kept_->of(worker) : KeptRow{};
      const RowLoss r = row_loss(row, r0 + b, target, c_, kept);
      loss_[static_cast<size_t>(b)] = r.loss;
      if (!grads) return;
      if (grad16_ != nullptr && c_.avx512_rows && !c_.fp8) {
        grad_row_bf16_avx512(kept.q, c_.capped ? kept.dydz : nullptr, r.grad.uncapped_slope,
                             r.grad.inv_s, r.grad.weight, target, c_.V, grad16_ + b * c_.ld);
      } else if (grad16_ != nullptr) {
        grad_row(kept, grad16_ + b * c_.ld, c_.V, target, r.grad);
      } else {
        grad_row(kept, grad32_ + b * c_.ld, c_.V, target, r.grad);
      }
    });
  }

  // The block's rows of x as the matmuls see them.
  const float* block_inputs(int64_t r0, int64_t rows) {
    const float* xb = p_.x + r0 * c_.d;
    if (!c_.fp8) return xb;
    round_e4m3_matrix(xb, buffers_.x_e4m3.floats(), rows * c_.d, c_.x_scale);
    return buffers_.x_e4m3.floats();
  }

  const Config& c_;
  const FusedLossParams& p_;
  const float* weights_;
  const PackedB* packed_ = nullptr;  // W packed for the logits: the caller's, or buffers_'
  int64_t logit_rows_;               // rows per logits block
  float* logits_;                    // [logit_rows, ld]
  bf16* grad16_ = nullptr;           // the block's gradients with bf16 products, [rows, ld]
  float* grad32_ = nullptr;          // the same with fp32 products
  std::optional<KeptRows> kept_;     // with gradients
  std::vector<double> loss_;         // [rows]
  FusedLossBuffers own_buffers_;     // the call's own, when the caller keeps none
  FusedLossBuffers& buffers_;        // the caller's, or own_buffers_
};

// The head's operands as the products see them: the inputs themselves, or with the FP8 head
// their E4M3-rounded copies (materialised whole; only the unfused and few-row paths use this).
struct Fp8Operands {
  std::vector<float> x_rounded, w_rounded;
  const float* x;
  const float* W;
  Fp8Operands(const FusedLossParams& p, const Config& c) : x(p.x), W(p.W) {
    if (!c.fp8) return;
    x_rounded.resize(static_cast<size_t>(c.T * c.d));
    w_rounded.resize(static_cast<size_t>(c.V * c.d));
    round_e4m3_matrix(p.x, x_rounded.data(), c.T * c.d, c.x_scale);
    round_e4m3_matrix(p.W, w_rounded.data(), c.V * c.d, c.w_scale);
    x = x_rounded.data();
    W = w_rounded.data();
  }
};

}  // namespace

double fused_linear_cross_entropy_forward(const FusedLossParams& p, float* per_token) {
  const Config c = resolve(p, true);
  if (c.T == 0) return 0.0;
  FusedHead head(c, p, false);
  return head.run(per_token, nullptr, nullptr);
}

double fused_linear_cross_entropy_backward(const FusedLossParams& p, float* dx, float* dW) {
  const Config c = resolve(p, true);
  if (c.T == 0) return 0.0;
  FusedHead head(c, p, dx != nullptr || dW != nullptr);
  return head.run(nullptr, dx, dW);
}

double linear_cross_entropy_unfused(const FusedLossParams& p, float* dx, float* dW) {
  const Config c = resolve(p, true);
  if (c.T == 0) return 0.0;
  const Fp8Operands ops(p, c);
  const float* x = ops.x;
  const float* W = ops.W;
  const bool grads = dx != nullptr || dW != nullptr;
  const auto tv = static_cast<size_t>(c.T * c.V);
  // Left uninitialized: every element is written before it is read, and zeroing 3 GB would
  // charge the baseline for work the computation does not need.
  std::unique_ptr<float[]> logits(new float[tv]);
  std::unique_ptr<float[]> grad(grads ? new float[tv] : nullptr);
  matmul(p.precision, Trans::kNo, Trans::kYes, c.T, c.V, c.d, 1.0f, x, c.d, W, c.d, 0.0f,
         logits.get(), c.V);
  std::vector<double> loss(static_cast<size_t>(c.T));
  const KeptRows kept_rows(c.V);
  parallel_rows(c.T, [&](int64_t t, int worker) {
    float* z = logits.get() + t * c.V;
    const int32_t target = p.targets[t];
    const KeptRow kept = grads ? kept_rows.of(worker) : KeptRow{};
    const RowLoss r = row_loss(z, t, target, c, kept);
    loss[static_cast<size_t>(t)] =
        c.row_weights != nullptr ? static_cast<double>(c.row_weights[t]) * r.loss : r.loss;
    if (grads) grad_row(kept, grad.get() + t * c.V, c.V, target, r.grad);
  });
  if (dx != nullptr) {
    matmul(p.precision, Trans::kNo, Trans::kNo, c.T, c.d, c.V, c.loss_scale, grad.get(), c.V, W,
           c.d, 0.0f, dx, c.d);
  }
  if (dW != nullptr) {
    matmul(p.precision, Trans::kYes, Trans::kNo, c.V, c.d, c.T, c.loss_scale, grad.get(), c.V, x,
           c.d, 1.0f, dW, c.d);
  }
  double total = 0.0;
  for (double l : loss) total += l;
  return total;
}

void capped_logits(const FusedLossParams& p, float* out) {
  if (p.temperature != 1.0f || p.row_weights != nullptr || p.entropy != nullptr) {
    throw Error(
        "capped_logits gives the untempered logits: leave temperature, row_weights and "
        "entropy at their defaults (samplers apply their own temperature)");
  }
  const Config c = resolve(p, false);
  if (c.T == 0) return;
  const Fp8Operands ops(p, c);
  const float* x = ops.x;
  const float* W = ops.W;
  const PackedB* packed = packed_weights(p, c);
  if (packed != nullptr) {
    matmul(Trans::kNo, c.T, 1.0f, x, c.d, *packed, 0.0f, out, c.V);
  } else {
    matmul(p.precision, Trans::kNo, Trans::kYes, c.T, c.V, c.d, 1.0f, x, c.d, W, c.d, 0.0f, out,
           c.V);
  }
  if (!c.capped) return;
  parallel_rows(c.T, [&](int64_t t, int) {
    float* row = out + t * c.V;
    soft_cap_row(row, row, c.V, c.softcap, c.inv_divisor);
  });
}

namespace {

// Bytes per value of a gradient block: bf16 with bf16 products, else fp32.
int64_t gradient_bytes_per_value(const FusedLossParams& p) {
  return p.precision == Precision::kBf16 ? static_cast<int64_t>(sizeof(bf16))
                                         : static_cast<int64_t>(sizeof(float));
}

}  // namespace

int64_t fused_linear_cross_entropy_workspace_bound(const FusedLossParams& p) {
  const int64_t row_bytes = workspace_ld(std::max<int64_t>(p.V, 1)) * gradient_bytes_per_value(p);
  // Compared by division: kMinLossRowBlock rows of a huge V would overflow.
  const int64_t wanted = row_bytes > kMaxRaisedWorkspaceBytes / kMinLossRowBlock
                             ? kMaxRaisedWorkspaceBytes
                             : kMinLossRowBlock * row_bytes;
  return std::clamp(wanted, kMaxGradientBlockBytes, kMaxRaisedWorkspaceBytes);
}

int64_t fused_linear_cross_entropy_row_block(const FusedLossParams& p) {
  if (p.T <= 0 || p.V <= 0) return 0;
  if (p.row_block > 0) return std::min(p.row_block, p.T);
  const int64_t row_bytes = workspace_ld(p.V) * gradient_bytes_per_value(p);
  const int64_t max_rows =
      std::max<int64_t>(1, fused_linear_cross_entropy_workspace_bound(p) / row_bytes);
  // The fewest blocks that fit, of equal size (to a row): T = 512 with room for 166 rows is
  // four blocks of 128, not three of 166 and one of 14.
  const int64_t blocks = (p.T + max_rows - 1) / max_rows;
  return (p.T + blocks - 1) / blocks;
}

int64_t fused_linear_cross_entropy_logit_rows(const FusedLossParams& p) {
  const int64_t block = fused_linear_cross_entropy_row_block(p);
  if (block == 0) return 0;
  if (p.logit_rows > 0) return std::min(p.logit_rows, block);
  const int64_t row_bytes = workspace_ld(p.V) * static_cast<int64_t>(sizeof(float));
  int64_t rows = std::max(kMinLogitRows, kLogitsBlockBytes / row_bytes);
  const int64_t weight_bytes = p.V * p.d * (p.precision == Precision::kBf16 ? 2 : 4);
  if (weight_bytes > kCachedWeightBytes) {
    rows = std::max({rows, kMinStreamedWeightLogitRows, ceil_div(2 * weight_bytes, row_bytes)});
  }
  return std::min(rows, block);
}

size_t fused_linear_cross_entropy_workspace_bytes(const FusedLossParams& p) {
  if (p.T <= 0 || p.d <= 0 || p.V <= 0) return 0;
  const int64_t rows = fused_linear_cross_entropy_row_block(p);
  const int64_t ld = workspace_ld(p.V);
  const int64_t threads = ThreadPool::current().size();
  int64_t bytes = fused_linear_cross_entropy_logit_rows(p) * ld * 4 +  // the logits block
                  rows * ld * gradient_bytes_per_value(p) +            // the gradient block
                  threads * 2 * p.V * 4 +                              // the kept rows
                  rows * static_cast<int64_t>(sizeof(double));         // the rows' losses
  if (p.fp8) bytes += (p.V * p.d + rows * p.d) * static_cast<int64_t>(sizeof(float));
  return static_cast<size_t>(bytes);
}

}  // namespace nanogpt
