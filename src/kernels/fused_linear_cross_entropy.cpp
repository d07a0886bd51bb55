#include "kernels/fused_linear_cross_entropy.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "kernels/exp_approx.hpp"
#include "kernels/fp8.hpp"
#include "kernels/gemm.hpp"
#include "kernels/target.hpp"
#include "runtime/aligned_memory.hpp"
#include "runtime/error.hpp"
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
  bool capped;
  // With the cap, softcap here is the cap divided by the temperature: (cap/τ)·σ(z/divisor) is
  // y/τ, so every pass of the loss sees the tempered logits with no extra multiply.
  float softcap, inv_divisor;
  float inv_temperature;  // 1/τ; without the cap the rows are scaled by it
  bool fp8;
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

Config resolve(const FusedLossParams& p, bool need_targets, bool gradients = true) {
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
  if (p.row_block < 0) throw Error(where + "row_block must be >= 0 (0 = default)");
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
  c.rows = std::max<int64_t>(1, fused_linear_cross_entropy_row_block(p, gradients));
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

// Σ_j exp(y_j - m), in kLanes partial sums combined pairwise.
template <bool kCapped>
__attribute__((always_inline)) inline float sum_exp_loop(const float* v, int64_t n, float m,
                                                         float softcap) {
  float lanes[kLanes] = {};
  int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes) {
    for (int l = 0; l < kLanes; ++l)
      lanes[l] += exp_approx(logit_of<kCapped>(v[j + l], softcap) - m);
  }
  for (int l = 0; j < n; ++j, ++l) lanes[l] += exp_approx(logit_of<kCapped>(v[j], softcap) - m);
  for (int width = kLanes / 2; width > 0; width /= 2) {
    for (int l = 0; l < width; ++l) lanes[l] += lanes[l + width];
  }
  return lanes[0];
}

NANOGPT_ROW_KERNEL float sum_exp_row(const float* v, int64_t n, float m, bool capped,
                                     float softcap) {
  return capped ? sum_exp_loop<true>(v, n, m, softcap) : sum_exp_loop<false>(v, n, m, softcap);
}

struct GradRowArgs {
  bool capped;
  float softcap, inv_divisor;
  float m, inv_s;  // the row's max and 1 / Σ exp(y - m): p = exp(y - m)·inv_s
  bool fp8;
  float grad_scale, inv_grad_scale;
  float uncapped_slope;  // dy/dz without the cap: 1/τ
  float weight;          // the row's weight w_t
};

// g_j = dloss/dz_j = (p_j - [j == target])·dy_j/dz_j for the row's own loss, rounded to E5M2
// (after dividing by grad_scale) in FP8 mode, from a row as row_loss left it (e with the cap,
// z without), into g as fp32 or rounded to bf16 (what the bf16 products would round it to as
// they pack it: storing it so halves what they read). For fp32, `v` and `g` may be the same
// array.
// The flags are template parameters so that each variant is one straight loop to vectorize.
template <bool kCapped, bool kFp8>
__attribute__((always_inline)) inline void grad_row_loop(const float* v, float* g, int64_t n,
                                                         int64_t target, const GradRowArgs a) {
  const float slope = a.softcap * a.inv_divisor;
  for (int64_t j = 0; j < n; ++j) {
    const float y = logit_of<kCapped>(v[j], a.softcap);
    float dydz = a.uncapped_slope;
    if constexpr (kCapped) {
      const float e = v[j];
      const float sigma = 1.0f / (1.0f + e);
      dydz = slope * (e * sigma) * sigma;
    }
    const float p = exp_approx(y - a.m) * a.inv_s;
    // (A weight of 1 multiplies exactly: the plain loss's bits.)
    float gj = (p - (j == target ? 1.0f : 0.0f)) * dydz * a.weight;
    if constexpr (kFp8) gj = round_to_e5m2(gj * a.inv_grad_scale) * a.grad_scale;
    g[j] = gj;
  }
}

__attribute__((always_inline)) inline void grad_row_any(const float* v, float* g, int64_t n,
                                                        int64_t target, const GradRowArgs& args) {
  if (args.capped) {
    if (args.fp8) {
      grad_row_loop<true, true>(v, g, n, target, args);
    } else {
      grad_row_loop<true, false>(v, g, n, target, args);
    }
  } else if (args.fp8) {
    grad_row_loop<false, true>(v, g, n, target, args);
  } else {
    grad_row_loop<false, false>(v, g, n, target, args);
  }
}

NANOGPT_ROW_KERNEL void grad_row(const float* v, float* g, int64_t n, int64_t target,
                                 const GradRowArgs& args) {
  grad_row_any(v, g, n, target, args);
}

// The same rounded to bf16, a chunk at a time through fp32: GCC vectorizes the fp32 loop and
// the conversion apart, not fused (the narrowing store kept it scalar, 3x slower).
NANOGPT_ROW_KERNEL void grad_row(const float* v, bf16* g, int64_t n, int64_t target,
                                 const GradRowArgs& args) {
  constexpr int64_t kChunk = 512;
  alignas(64) float chunk[kChunk];
  uint16_t* bits = reinterpret_cast<uint16_t*>(g);
  for (int64_t j0 = 0; j0 < n; j0 += kChunk) {
    const int64_t len = std::min(kChunk, n - j0);
    grad_row_any(v + j0, chunk, len, target - j0, args);
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

template <class Fn>
void parallel_rows(int64_t rows, Fn&& fn) {
  const int64_t tasks = (rows + kRowsPerTask - 1) / kRowsPerTask;
  ThreadPool::current().parallel_for(static_cast<size_t>(tasks), [&](size_t task, int) {
    const int64_t begin = static_cast<int64_t>(task) * kRowsPerTask;
    const int64_t end = std::min(rows, begin + kRowsPerTask);
    for (int64_t i = begin; i < end; ++i) fn(i);
  });
}

// ---- one row, whole -----------------------------------------------------------------------

struct RowLoss {
  double loss;  // logsumexp(y) - y[target]
  GradRowArgs grad;
};

// The loss of one row of logits z[0, V), turning the row into what grad_row reads (in place:
// e = exp(-z/divisor) with the soft-cap, z left as is without). Both the fused calls and the
// unfused one go through here, so all return the same losses.
RowLoss row_loss(float* v, int64_t t, int64_t target, const Config& c) {
  const int64_t n = c.V;
  float m;
  if (!c.capped && c.inv_temperature != 1.0f) {
    for (int64_t j = 0; j < n; ++j) v[j] *= c.inv_temperature;
  }
  if (c.capped) {
    exp_neg_scaled_row(v, n, c.inv_divisor);
    // y = softcap/(1+e) falls as e rises, and rounding keeps that order: the largest y is the
    // smallest e's. (A NaN is skipped here but reaches the sum, so the loss is NaN.)
    m = logit_of<true>(min_row(v, n), c.softcap);
  } else {
    m = max_row(v, n);
  }
  double s = 0.0;
  for (int64_t j0 = 0; j0 < n; j0 += kSumSegment) {
    s += sum_exp_row(v + j0, std::min(kSumSegment, n - j0), m, c.capped, c.softcap);
  }
  const float y_target =
      c.capped ? logit_of<true>(v[target], c.softcap) : logit_of<false>(v[target], c.softcap);
  RowLoss r;
  r.loss = static_cast<double>(m) + std::log(s) - static_cast<double>(y_target);
  r.grad = GradRowArgs{c.capped,
                       c.softcap,
                       c.inv_divisor,
                       m,
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

// The logits workspace is kept in the caller's Workspace (runtime/workspace.hpp) from one call
// to the next: allocating it per call (up to kMaxLogitsWorkspaceBytes) cost a page fault and
// the kernel's zeroing of every page, each call (5% of a T = 4096, V = 8192 call). It is a
// buffer of its own rather than a cache of aligned operator new, which glibc did not reuse (the
// process grew 37, 69, 133 MiB after 1, 5, 17 calls).
float* logits_workspace(int64_t floats) {
  return Workspace::current().get<float>("fused_loss.logits", static_cast<size_t>(floats));
}

// With bf16 products, the rows' gradients in bf16, [rows, ld]; kept the same way.
bf16* gradient_workspace(int64_t values) {
  return Workspace::current().get<bf16>("fused_loss.gradient_bf16", static_cast<size_t>(values));
}

class FusedHead {
 public:
  FusedHead(const Config& c, const FusedLossParams& p)
      : c_(c),
        p_(p),
        weights_(p.W),
        packed_(packed_weights(p, c)),
        // Uninitialized: the logits GEMM writes every element before anything reads it.
        logits_(logits_workspace(c.rows * c.ld)),
        grad16_(p.precision == Precision::kBf16 ? gradient_workspace(c.rows * c.ld) : nullptr),
        loss_(static_cast<size_t>(c.rows)) {
    if (c.fp8) {
      w_rounded_.resize(static_cast<size_t>(c.V * c.d));
      round_e4m3_matrix(p.W, w_rounded_.data(), c.V * c.d, c.w_scale);
      weights_ = w_rounded_.data();
      x_rounded_.resize(static_cast<size_t>(c.rows * c.d));
    }
  }

  // Runs the row blocks in order: the block's logits, the rows' losses (and gradients, if
  // wanted, in place of the logits), then dx and dW from them. Returns Σ loss_t.
  double run(float* per_token, float* dx, float* dW) {
    const bool grads = dx != nullptr || dW != nullptr;
    // [rows, ld]: the logits, then e (or z), then g. Rows start on cache lines (ld is a
    // multiple of 16 floats).
    float* const z = logits_;
    double total = 0.0;
    for (int64_t r0 = 0; r0 < c_.T; r0 += c_.rows) {
      const int64_t rows = std::min(c_.rows, c_.T - r0);
      const float* xb = block_inputs(r0, rows);
      if (packed_ != nullptr) {
        matmul(Trans::kNo, rows, 1.0f, xb, c_.d, *packed_, 0.0f, z, c_.ld);
      } else {
        matmul(p_.precision, Trans::kNo, Trans::kYes, rows, c_.V, c_.d, 1.0f, xb, c_.d, weights_,
               c_.d, 0.0f, z, c_.ld);
      }
      parallel_rows(rows, [&](int64_t i) {
        float* row = z + i * c_.ld;
        const int64_t target = p_.targets[r0 + i];
        const RowLoss r = row_loss(row, r0 + i, target, c_);
        loss_[static_cast<size_t>(i)] = r.loss;
        if (!grads) return;
        if (grad16_ != nullptr) {
          grad_row(row, grad16_ + i * c_.ld, c_.V, target, r.grad);
        } else {
          grad_row(row, row, c_.V, target, r.grad);
        }
      });
      for (int64_t i = 0; i < rows; ++i) {
        const double loss = loss_[static_cast<size_t>(i)];
        if (per_token != nullptr) per_token[r0 + i] = static_cast<float>(loss);
        total +=
            c_.row_weights != nullptr ? static_cast<double>(c_.row_weights[r0 + i]) * loss : loss;
      }
      // loss_scale multiplies the fp32 products, after the gradient was rounded unscaled.
      if (dx != nullptr) {
        if (grad16_ != nullptr) {
          gemm_bf16(Trans::kNo, Trans::kNo, rows, c_.d, c_.V, c_.loss_scale, grad16_, c_.ld,
                    weights_, c_.d, 0.0f, dx + r0 * c_.d, c_.d);
        } else {
          matmul(p_.precision, Trans::kNo, Trans::kNo, rows, c_.d, c_.V, c_.loss_scale, z, c_.ld,
                 weights_, c_.d, 0.0f, dx + r0 * c_.d, c_.d);
        }
      }
      if (dW != nullptr) {
        if (grad16_ != nullptr) {
          gemm_bf16(Trans::kYes, Trans::kNo, c_.V, c_.d, rows, c_.loss_scale, grad16_, c_.ld, xb,
                    c_.d, 1.0f, dW, c_.d);
        } else {
          matmul(p_.precision, Trans::kYes, Trans::kNo, c_.V, c_.d, rows, c_.loss_scale, z, c_.ld,
                 xb, c_.d, 1.0f, dW, c_.d);
        }
      }
    }
    return total;
  }

 private:
  // The block's rows of x as the matmuls see them.
  const float* block_inputs(int64_t r0, int64_t rows) {
    const float* xb = p_.x + r0 * c_.d;
    if (!c_.fp8) return xb;
    round_e4m3_matrix(xb, x_rounded_.data(), rows * c_.d, c_.x_scale);
    return x_rounded_.data();
  }

  const Config& c_;
  const FusedLossParams& p_;
  const float* weights_;
  const PackedB* packed_;  // W packed for the logits, or null
  float* logits_;
  bf16* grad16_;              // bf16 products: the block's gradients, rounded once here
  std::vector<double> loss_;  // [rows]
  std::vector<float> w_rounded_, x_rounded_;
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
  const Config c = resolve(p, true, false);
  if (c.T == 0) return 0.0;
  FusedHead head(c, p);
  return head.run(per_token, nullptr, nullptr);
}

double fused_linear_cross_entropy_backward(const FusedLossParams& p, float* dx, float* dW) {
  const Config c = resolve(p, true);
  if (c.T == 0) return 0.0;
  FusedHead head(c, p);
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
  parallel_rows(c.T, [&](int64_t t) {
    float* z = logits.get() + t * c.V;
    const int32_t target = p.targets[t];
    const RowLoss r = row_loss(z, t, target, c);
    loss[static_cast<size_t>(t)] =
        c.row_weights != nullptr ? static_cast<double>(c.row_weights[t]) * r.loss : r.loss;
    if (grads) grad_row(z, grad.get() + t * c.V, c.V, target, r.grad);
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
  parallel_rows(c.T, [&](int64_t t) {
    float* row = out + t * c.V;
    soft_cap_row(row, row, c.V, c.softcap, c.inv_divisor);
  });
}

namespace {

// Workspace bytes per logit of a row block: the fp32 logits, and with bf16 products the bf16
// gradient beside them.
int64_t row_bytes_per_value(const FusedLossParams& p) {
  return static_cast<int64_t>(sizeof(float)) +
         (p.precision == Precision::kBf16 ? static_cast<int64_t>(sizeof(bf16)) : 0);
}

}  // namespace

int64_t fused_linear_cross_entropy_workspace_bound(const FusedLossParams& p) {
  const int64_t row_bytes = workspace_ld(std::max<int64_t>(p.V, 1)) * row_bytes_per_value(p);
  // Compared by division: kMinLossRowBlock rows of a huge V would overflow.
  const int64_t wanted = row_bytes > kMaxRaisedWorkspaceBytes / kMinLossRowBlock
                             ? kMaxRaisedWorkspaceBytes
                             : kMinLossRowBlock * row_bytes;
  return std::clamp(wanted, kMaxLogitsWorkspaceBytes, kMaxRaisedWorkspaceBytes);
}

int64_t fused_linear_cross_entropy_row_block(const FusedLossParams& p, bool gradients) {
  if (p.T <= 0 || p.V <= 0) return 0;
  if (p.row_block > 0) return std::min(p.row_block, p.T);
  const int64_t row_bytes = workspace_ld(p.V) * row_bytes_per_value(p);
  int64_t max_rows =
      std::max<int64_t>(1, fused_linear_cross_entropy_workspace_bound(p) / row_bytes);
  if (!gradients && p.W_packed != nullptr && !p.fp8) {
    max_rows = std::min(max_rows, std::max(kMinForwardRowBlock, kForwardLogitsBytes / row_bytes));
  }
  // The fewest blocks that fit, of equal size (to a row): T = 512 with room for 166 rows is
  // four blocks of 128, not three of 166 and one of 14.
  const int64_t blocks = (p.T + max_rows - 1) / max_rows;
  return (p.T + blocks - 1) / blocks;
}

size_t fused_linear_cross_entropy_workspace_bytes(const FusedLossParams& p) {
  if (p.T <= 0 || p.d <= 0 || p.V <= 0) return 0;
  const int64_t rows = fused_linear_cross_entropy_row_block(p);
  int64_t bytes = rows * workspace_ld(p.V) * row_bytes_per_value(p) +
                  rows * static_cast<int64_t>(sizeof(double));  // the rows' losses
  if (p.fp8) bytes += (p.V * p.d + rows * p.d) * static_cast<int64_t>(sizeof(float));
  return static_cast<size_t>(bytes);
}

}  // namespace nanogpt
