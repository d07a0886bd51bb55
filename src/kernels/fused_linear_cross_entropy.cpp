#include "kernels/fused_linear_cross_entropy.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "kernels/fp8.hpp"
#include "kernels/gemm.hpp"
#include "runtime/error.hpp"
#include "runtime/thread_pool.hpp"

// The row loops below are compiled once per ISA, as the GEMM's micro-kernel is: the library is
// built without -march, and these loops (an exp per logit, twice) are the only work besides the
// GEMM.
#define NANOGPT_ROW_KERNEL __attribute__((target_clones("avx512f", "arch=haswell", "default")))

namespace nanogpt {

namespace {

// Rows per parallel task in the elementwise passes: a task is then rows × vocab_chunk
// exponentials, tens of microseconds, well above the cost of handing it out.
constexpr int64_t kRowsPerTask = 8;
// Independent partial sums per row: enough for one AVX-512 vector, and a fixed association
// order, so the sum is the same whichever clone runs.
constexpr int kLanes = 16;
// Elements per task when rounding a matrix to FP8.
constexpr int64_t kQuantizeTaskElements = int64_t{1} << 16;

// Everything the kernels need, with the defaults filled in.
struct Config {
  int64_t T, d, V, rows, cols;  // rows/cols: tile shape
  bool capped;
  float softcap, inv_divisor;
  bool fp8;
  float x_scale, w_scale, grad_scale;
  float loss_scale;
};

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
  if (p.row_block < 0 || p.vocab_chunk < 0) {
    throw Error(where + "row_block and vocab_chunk must be >= 0 (0 = default)");
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
  c.rows = std::max<int64_t>(1, std::min(p.row_block > 0 ? p.row_block : kDefaultRowBlock, p.T));
  c.cols = std::min(p.vocab_chunk > 0 ? p.vocab_chunk : kDefaultVocabChunk, p.V);
  c.capped = p.softcap > 0.0f;
  c.softcap = p.softcap;
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
  return c;
}

// ---- elementwise math -------------------------------------------------------------------------

// expf without libm, so the row loops vectorize (GCC only calls libmvec under -ffast-math).
// Cephes' range reduction and minimax polynomial: within 2 ulp of expf on [-87, 88]. Below -87
// it returns 0 (true value < 2^-125, negligible against a row maximum of 1); above 88 it
// saturates at e^88 (only reached by σ's exp(-u) for u < -88, where σ is then ~6e-39 ≈ 0).
// NaN propagates.
inline float exp_approx(float x) {
  const float clamped = std::min(std::max(x, -87.0f), 88.0f);
  // Adding 1.5·2^23 rounds to an integer and leaves it in the low mantissa bits.
  const float kShift = 12582912.0f;
  const float shifted = clamped * 1.44269504088896341f + kShift;
  const float n = shifted - kShift;
  const int32_t ni = std::bit_cast<int32_t>(shifted) - std::bit_cast<int32_t>(kShift);
  // ln 2 in two parts; n·0.693359375 is exact for |n| <= 128.
  float r = clamped - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  float poly = 1.9875691500e-4f;
  poly = poly * r + 1.3981999507e-3f;
  poly = poly * r + 8.3334519073e-3f;
  poly = poly * r + 4.1665795894e-2f;
  poly = poly * r + 1.6666665459e-1f;
  poly = poly * r + 5.0000001201e-1f;
  const float er = poly * (r * r) + r + 1.0f;
  const float result = er * std::bit_cast<float>((ni + 127) << 23);
  return x < -87.0f ? 0.0f : result;
}

// Soft-capped logits from z. σ(u) = 1/(1+e) with e = exp(-u); the backward uses the same
// expressions so that it sees the forward's y bit for bit.
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

// Σ_j exp(y_j - m), in kLanes partial sums combined pairwise.
NANOGPT_ROW_KERNEL float sum_exp_row(const float* y, int64_t n, float m) {
  float lanes[kLanes] = {};
  int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes) {
    for (int l = 0; l < kLanes; ++l) lanes[l] += exp_approx(y[j + l] - m);
  }
  for (int l = 0; j < n; ++j, ++l) lanes[l] += exp_approx(y[j] - m);
  for (int width = kLanes / 2; width > 0; width /= 2) {
    for (int l = 0; l < width; ++l) lanes[l] += lanes[l + width];
  }
  return lanes[0];
}

struct GradRowArgs {
  bool capped;
  float softcap, inv_divisor;
  float m, inv_s;  // the row's max and 1 / Σ exp(y - m): p = exp(y - m)·inv_s
  bool fp8;
  float grad_scale, inv_grad_scale;
};

// g_j = dloss/dz_j = (p_j - [j == target])·dy_j/dz_j for the row's own loss, rounded to E5M2
// (after dividing by grad_scale) in FP8 mode. `z` and `g` may be the same array.
// dy/dz = softcap/divisor·σ(1-σ), written as (e·σ)·σ: no cancellation when σ is near 1.
// The flags are template parameters so that each variant is one straight loop to vectorize.
template <bool kCapped, bool kFp8>
__attribute__((always_inline)) inline void grad_row_loop(const float* z, float* g, int64_t n,
                                                         int64_t target, const GradRowArgs a) {
  const float slope = a.softcap * a.inv_divisor;
  for (int64_t j = 0; j < n; ++j) {
    float y = z[j];
    float dydz = 1.0f;
    if constexpr (kCapped) {
      const float e = exp_approx(-(z[j] * a.inv_divisor));
      const float sigma = 1.0f / (1.0f + e);
      y = a.softcap * sigma;
      dydz = slope * (e * sigma) * sigma;
    }
    const float p = exp_approx(y - a.m) * a.inv_s;
    float gj = (p - (j == target ? 1.0f : 0.0f)) * dydz;
    if constexpr (kFp8) gj = round_to_e5m2(gj * a.inv_grad_scale) * a.grad_scale;
    g[j] = gj;
  }
}

NANOGPT_ROW_KERNEL void grad_row(const float* z, float* g, int64_t n, int64_t target,
                                 const GradRowArgs& args) {
  if (args.capped) {
    if (args.fp8) {
      grad_row_loop<true, true>(z, g, n, target, args);
    } else {
      grad_row_loop<true, false>(z, g, n, target, args);
    }
  } else if (args.fp8) {
    grad_row_loop<false, true>(z, g, n, target, args);
  } else {
    grad_row_loop<false, false>(z, g, n, target, args);
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

// ---- the fused sweep ----------------------------------------------------------------------

// Per-row state of the online logsumexp over the vocabulary: lse = m + log(s).
struct RowState {
  std::vector<float> m;       // running max of y
  std::vector<double> s;      // Σ exp(y - m)
  std::vector<float> target;  // y at the target class
};

class FusedHead {
 public:
  FusedHead(const Config& c, const FusedLossParams& p) : c_(c), p_(p) {
    tile_.resize(static_cast<size_t>(c.rows * c.cols));
    state_.m.resize(static_cast<size_t>(c.rows));
    state_.s.resize(static_cast<size_t>(c.rows));
    state_.target.resize(static_cast<size_t>(c.rows));
    weights_ = p.W;
    if (c.fp8 && c.T > 0) {
      w_rounded_.resize(static_cast<size_t>(c.V * c.d));
      round_e4m3_matrix(p.W, w_rounded_.data(), c.V * c.d, c.w_scale);
      weights_ = w_rounded_.data();
      x_rounded_.resize(static_cast<size_t>(c.rows * c.d));
    }
  }

  // Runs the row blocks in order: the logsumexp sweep, then, if gradients are wanted, the
  // gradient sweep. Returns Σ loss_t.
  double run(float* per_token, float* dx, float* dW) {
    double total = 0.0;
    for (int64_t r0 = 0; r0 < c_.T; r0 += c_.rows) {
      const int64_t rows = std::min(c_.rows, c_.T - r0);
      const float* xb = block_inputs(r0, rows);
      logsumexp_sweep(xb, r0, rows);
      for (int64_t i = 0; i < rows; ++i) {
        const auto k = static_cast<size_t>(i);
        const double loss = static_cast<double>(state_.m[k]) + std::log(state_.s[k]) -
                            static_cast<double>(state_.target[k]);
        if (per_token != nullptr) per_token[r0 + i] = static_cast<float>(loss);
        total += loss;
      }
      if (dx != nullptr || dW != nullptr) gradient_sweep(xb, r0, rows, dx, dW);
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

  // z tile = x_block · W[c0 : c0+cols]ᵀ into tile_ (leading dimension cols).
  void logits_tile(const float* xb, int64_t rows, int64_t c0, int64_t cols) {
    matmul(p_.precision, Trans::kNo, Trans::kYes, rows, cols, c_.d, 1.0f, xb, c_.d,
           weights_ + c0 * c_.d, c_.d, 0.0f, tile_.data(), cols);
  }

  void logsumexp_sweep(const float* xb, int64_t r0, int64_t rows) {
    std::fill(state_.m.begin(), state_.m.end(), -std::numeric_limits<float>::infinity());
    std::fill(state_.s.begin(), state_.s.end(), 0.0);
    for (int64_t c0 = 0; c0 < c_.V; c0 += c_.cols) {
      const int64_t cols = std::min(c_.cols, c_.V - c0);
      logits_tile(xb, rows, c0, cols);
      parallel_rows(rows, [&](int64_t i) {
        const auto k = static_cast<size_t>(i);
        float* y = tile_.data() + i * cols;
        if (c_.capped) soft_cap_row(y, y, cols, c_.softcap, c_.inv_divisor);
        const float chunk_max = max_row(y, cols);
        if (chunk_max > state_.m[k]) {
          // exp(-inf) = 0 clears the empty initial sum.
          state_.s[k] *= std::exp(static_cast<double>(state_.m[k]) - chunk_max);
          state_.m[k] = chunk_max;
        }
        state_.s[k] += sum_exp_row(y, cols, state_.m[k]);
        const int64_t t = p_.targets[r0 + i] - c0;
        if (t >= 0 && t < cols) state_.target[k] = y[t];
      });
    }
  }

  void gradient_sweep(const float* xb, int64_t r0, int64_t rows, float* dx, float* dW) {
    std::vector<float> inv_s(static_cast<size_t>(rows));
    for (size_t k = 0; k < inv_s.size(); ++k) inv_s[k] = static_cast<float>(1.0 / state_.s[k]);
    for (int64_t c0 = 0; c0 < c_.V; c0 += c_.cols) {
      const int64_t cols = std::min(c_.cols, c_.V - c0);
      logits_tile(xb, rows, c0, cols);
      parallel_rows(rows, [&](int64_t i) {
        const auto k = static_cast<size_t>(i);
        const GradRowArgs args{c_.capped, c_.softcap, c_.inv_divisor, state_.m[k],
                               inv_s[k],  c_.fp8,     c_.grad_scale,  1.0f / c_.grad_scale};
        float* g = tile_.data() + i * cols;
        grad_row(g, g, cols, p_.targets[r0 + i] - c0, args);
      });
      // loss_scale multiplies the fp32 products, after the gradient was rounded unscaled.
      if (dx != nullptr) {
        matmul(p_.precision, Trans::kNo, Trans::kNo, rows, c_.d, cols, c_.loss_scale, tile_.data(),
               cols, weights_ + c0 * c_.d, c_.d, c0 == 0 ? 0.0f : 1.0f, dx + r0 * c_.d, c_.d);
      }
      if (dW != nullptr) {
        matmul(p_.precision, Trans::kYes, Trans::kNo, cols, c_.d, rows, c_.loss_scale, tile_.data(),
               cols, xb, c_.d, 1.0f, dW + c0 * c_.d, c_.d);
      }
    }
  }

  const Config& c_;
  const FusedLossParams& p_;
  const float* weights_;
  std::vector<float> tile_;
  RowState state_;
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
  const Config c = resolve(p, true);
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
    float* y = grads ? grad.get() + t * c.V : z;
    if (c.capped) {
      soft_cap_row(z, y, c.V, c.softcap, c.inv_divisor);
    } else if (y != z) {
      std::copy(z, z + c.V, y);
    }
    const float m = max_row(y, c.V);
    const double s = sum_exp_row(y, c.V, m);
    const int32_t target = p.targets[t];
    loss[static_cast<size_t>(t)] = static_cast<double>(m) + std::log(s) - y[target];
    if (grads) {
      const GradRowArgs args{
          c.capped, c.softcap,    c.inv_divisor,      m, static_cast<float>(1.0 / s),
          c.fp8,    c.grad_scale, 1.0f / c.grad_scale};
      grad_row(z, y, c.V, target, args);
    }
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
  const Config c = resolve(p, false);
  if (c.T == 0) return;
  const Fp8Operands ops(p, c);
  const float* x = ops.x;
  const float* W = ops.W;
  matmul(p.precision, Trans::kNo, Trans::kYes, c.T, c.V, c.d, 1.0f, x, c.d, W, c.d, 0.0f, out, c.V);
  if (!c.capped) return;
  parallel_rows(c.T, [&](int64_t t) {
    float* row = out + t * c.V;
    soft_cap_row(row, row, c.V, c.softcap, c.inv_divisor);
  });
}

size_t fused_linear_cross_entropy_workspace_bytes(const FusedLossParams& p) {
  if (p.T <= 0 || p.d <= 0 || p.V <= 0) return 0;
  const int64_t rows =
      std::max<int64_t>(1, std::min(p.row_block > 0 ? p.row_block : kDefaultRowBlock, p.T));
  const int64_t cols = std::min(p.vocab_chunk > 0 ? p.vocab_chunk : kDefaultVocabChunk, p.V);
  int64_t floats = rows * cols + rows;  // the tile and inv_s
  int64_t bytes = rows * static_cast<int64_t>(sizeof(float) + sizeof(double) + sizeof(float));
  if (p.fp8) floats += p.V * p.d + rows * p.d;
  bytes += floats * static_cast<int64_t>(sizeof(float));
  return static_cast<size_t>(bytes);
}

}  // namespace nanogpt
