#include "model/block_ops.hpp"

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <type_traits>
#include <vector>

#include "kernels/axpby.hpp"
#include "kernels/dot.hpp"
#include "kernels/prefetch.hpp"
#include "kernels/rmsnorm.hpp"
#include "kernels/streamed_store.hpp"
#include "runtime/integer_math.hpp"
#include "runtime/profiler.hpp"
#include "runtime/thread_pool.hpp"

namespace nanogpt {

namespace {

// The element-wise passes run over fixed blocks of token rows. Block boundaries depend only on
// T, and reductions keep one partial sum per block, added in block order, so results are
// bitwise the same on any number of threads.
constexpr int64_t kRowBlock = 32;

int64_t row_blocks(int64_t T) {
  return ceil_div(T, kRowBlock);
}

// fn(block, t0, t1) for each block of rows [t0, t1), as one profiled operation that moves
// about `floats_per_row` values of 4 bytes per row.
template <class Fn>
void for_row_blocks(const char* name, int64_t T, int64_t floats_per_row, Fn&& fn) {
  ProfileScope scope("elementwise", name, {T}, 0.0, 4.0 * static_cast<double>(T * floats_per_row));
  const int64_t blocks = row_blocks(T);
  if (blocks == 1) {
    fn(int64_t{0}, int64_t{0}, T);
    return;
  }
  ThreadPool::current().parallel_for(static_cast<size_t>(blocks), [&](size_t b, int) {
    const int64_t t0 = static_cast<int64_t>(b) * kRowBlock;
    fn(static_cast<int64_t>(b), t0, std::min(T, t0 + kRowBlock));
  });
}

// Σ over blocks of k per-block partial sums, in block order.
template <size_t k>
std::array<double, k> sum_blocks(const std::vector<std::array<double, k>>& partial) {
  std::array<double, k> total{};
  for (const auto& p : partial) {
    for (size_t i = 0; i < k; ++i) total[i] += p[i];
  }
  return total;
}

// out[0, n) = values[0, n) rounded to bf16, where out is given (float only: the double model
// never stores rounded rows).
template <class Real>
void round_rows(const Real* values, int64_t n, bf16* out) {
  if (out == nullptr) return;
  if constexpr (std::is_same_v<Real, float>) {
    round_to_bf16(values, n, out);
  } else {
    throw std::invalid_argument("round_rows: bf16 rows are for float models");
  }
}

// A row a pass writes and only a later one reads (the backward; a product after attention), by
// when the caches have moved on: stored around them (kernels/streamed_store.hpp). The double
// model's rows, plainly. The pass calls streamed_stores_fence() before its task ends.
template <class Real>
void store_for_later(const Real* row, int64_t n, Real* out) {
  if constexpr (std::is_same_v<Real, float>) {
    copy_streamed(row, n, out);
  } else {
    std::memcpy(out, row, static_cast<size_t>(n) * sizeof(Real));
  }
}

// The same for a row stored rounded to bf16 (float only, as round_rows).
template <class Real>
void store_rounded_for_later(const Real* row, int64_t n, bf16* out) {
  if constexpr (std::is_same_v<Real, float>) {
    round_to_bf16_streamed(row, n, out);
  } else {
    throw std::invalid_argument("store_rounded_for_later: bf16 rows are for float models");
  }
}

}  // namespace

template <class Real>
void linear_forward(Precision precision, const char* name, int64_t T, int64_t n_in, int64_t n_out,
                    const Real* x, const Real* W, Real beta, Real* y,
                    const ProductEpilogue<Real>& epilogue, const PackedB* packed) {
  if constexpr (std::is_same_v<Real, float>) {
    if (packed != nullptr) {
      model_gemm_packed(name, T, x, *packed, beta, y, epilogue);
      return;
    }
  }
  model_gemm(precision, name, Trans::kNo, Trans::kYes, T, n_out, n_in, Real(1), x, n_in, W, n_in,
             beta, y, n_out, epilogue);
}

template <class Real>
void linear_forward(Precision precision, const char* name, int64_t T, int64_t n_in, int64_t n_out,
                    const Real* x, const Real* W, ProductRows<Real> y,
                    const ProductEpilogue<Real>& epilogue, const PackedB* packed) {
  if constexpr (std::is_same_v<Real, float>) {
    if (y.rounded != nullptr) {
      if (packed != nullptr) {
        model_gemm_packed(name, T, x, *packed, y.rounded, epilogue);
      } else {
        model_gemm(precision, name, Trans::kNo, Trans::kYes, T, n_out, n_in, 1.0f, x, n_in, W, n_in,
                   y.rounded, n_out, epilogue);
      }
      return;
    }
  }
  linear_forward(precision, name, T, n_in, n_out, x, W, Real(0), y.values, epilogue, packed);
}

template <class Real>
void linear_forward(Precision precision, const char* name, int64_t T, int64_t n_in, int64_t n_out,
                    ProductRows<Real> x, const Real* W, Real beta, Real* y,
                    const ProductEpilogue<Real>& epilogue, const PackedB* packed) {
  if constexpr (std::is_same_v<Real, float>) {
    if (x.rounded != nullptr) {
      if (packed != nullptr) {
        model_gemm_packed(name, T, x.rounded, *packed, beta, y, epilogue);
      } else {
        model_gemm(precision, name, Trans::kNo, Trans::kYes, T, n_out, n_in, 1.0f, x.rounded, n_in,
                   W, n_in, beta, y, n_out, epilogue);
      }
      return;
    }
  }
  linear_forward(precision, name, T, n_in, n_out, x.values, W, beta, y, epilogue, packed);
}

template <class Real>
void linear_forward(Precision precision, const char* name, int64_t T, int64_t n_in, int64_t n_out,
                    ProductRows<Real> x, const Real* W, ProductRows<Real> y,
                    const ProductEpilogue<Real>& epilogue, const PackedB* packed) {
  if constexpr (std::is_same_v<Real, float>) {
    if (x.rounded != nullptr && y.rounded != nullptr) {
      if (packed != nullptr) {
        model_gemm_packed(name, T, x.rounded, *packed, y.rounded, epilogue);
      } else {
        model_gemm(precision, name, Trans::kNo, Trans::kYes, T, n_out, n_in, 1.0f, x.rounded, n_in,
                   W, n_in, y.rounded, n_out, epilogue);
      }
      return;
    }
    if (x.rounded != nullptr) {
      linear_forward(precision, name, T, n_in, n_out, x, W, 0.0f, y.values, epilogue, packed);
      return;
    }
  }
  linear_forward(precision, name, T, n_in, n_out, x.values, W, y, epilogue, packed);
}

template <class Real>
void linear_backward_weight(Precision precision, const char* name, int64_t T, int64_t n_in,
                            int64_t n_out, const Real* dy, const Real* x, Real* dW) {
  model_gemm(precision, name, Trans::kYes, Trans::kNo, n_out, n_in, T, Real(1), dy, n_out, x, n_in,
             Real(1), dW, n_in);
}

template <class Real>
void linear_backward_input(Precision precision, const char* name, int64_t T, int64_t n_in,
                           int64_t n_out, const Real* dy, const Real* W, Real* dx,
                           const ProductEpilogue<Real>& epilogue) {
  if (epilogue.relu_squared_output != nullptr) {
    model_gemm(precision, name, Trans::kNo, Trans::kNo, T, n_in, n_out, Real(1), dy, n_out, W, n_in,
               Real(0), dx, n_in, epilogue);
  } else {
    model_gemm(precision, name, Trans::kNo, Trans::kNo, T, n_in, n_out, Real(1), dy, n_out, W, n_in,
               Real(0), dx, n_in);
  }
}

template <class Real>
void linear_backward_input(Precision precision, const char* name, int64_t T, int64_t n_in,
                           int64_t n_out, const Real* dy, const Real* W, ProductRows<Real> dx,
                           const ProductEpilogue<Real>& epilogue) {
  if constexpr (std::is_same_v<Real, float>) {
    if (dx.rounded != nullptr) {
      model_gemm(precision, name, Trans::kNo, Trans::kNo, T, n_in, n_out, 1.0f, dy, n_out, W, n_in,
                 dx.rounded, n_in, epilogue);
      return;
    }
  }
  linear_backward_input(precision, name, T, n_in, n_out, dy, W, dx.values, epilogue);
}

template <class Real>
void linear_backward_weight(Precision precision, const char* name, int64_t T, int64_t n_in,
                            int64_t n_out, ProductRows<Real> dy, const Real* x, Real* dW) {
  if constexpr (std::is_same_v<Real, float>) {
    if (dy.rounded != nullptr) {
      model_gemm(precision, name, Trans::kYes, Trans::kNo, n_out, n_in, T, 1.0f, dy.rounded, n_out,
                 x, n_in, 1.0f, dW, n_in);
      return;
    }
  }
  linear_backward_weight(precision, name, T, n_in, n_out, dy.values, x, dW);
}

template <class Real>
void linear_backward_weight(Precision precision, const char* name, int64_t T, int64_t n_in,
                            int64_t n_out, const Real* dy, ProductRows<Real> x, Real* dW) {
  if constexpr (std::is_same_v<Real, float>) {
    if (x.rounded != nullptr) {
      model_gemm(precision, name, Trans::kYes, Trans::kNo, n_out, n_in, T, 1.0f, dy, n_out,
                 x.rounded, n_in, 1.0f, dW, n_in);
      return;
    }
  }
  linear_backward_weight(precision, name, T, n_in, n_out, dy, x.values, dW);
}

template <class Real>
void linear_backward_weight(Precision precision, const char* name, int64_t T, int64_t n_in,
                            int64_t n_out, ProductRows<Real> dy, ProductRows<Real> x, Real* dW) {
  if constexpr (std::is_same_v<Real, float>) {
    if (dy.rounded != nullptr && x.rounded != nullptr) {
      model_gemm(precision, name, Trans::kYes, Trans::kNo, n_out, n_in, T, 1.0f, dy.rounded, n_out,
                 x.rounded, n_in, 1.0f, dW, n_in);
      return;
    }
    if (x.rounded != nullptr) {
      linear_backward_weight(precision, name, T, n_in, n_out, dy.values, x, dW);
      return;
    }
  }
  linear_backward_weight(precision, name, T, n_in, n_out, dy, x.values, dW);
}

template <class Real>
void linear_backward_input(Precision precision, const char* name, int64_t T, int64_t n_in,
                           int64_t n_out, ProductRows<Real> dy, const Real* W, Real* dx) {
  if constexpr (std::is_same_v<Real, float>) {
    if (dy.rounded != nullptr) {
      model_gemm(precision, name, Trans::kNo, Trans::kNo, T, n_in, n_out, 1.0f, dy.rounded, n_out,
                 W, n_in, 0.0f, dx, n_in);
      return;
    }
  }
  linear_backward_input(precision, name, T, n_in, n_out, dy.values, W, dx);
}

template <class Real>
void linear_backward_input(Precision precision, const char* name, int64_t T, int64_t n_in,
                           int64_t n_out, ProductRows<Real> dy, const Real* W, ProductRows<Real> dx,
                           const ProductEpilogue<Real>& epilogue) {
  if constexpr (std::is_same_v<Real, float>) {
    if (dy.rounded != nullptr && dx.rounded != nullptr) {
      model_gemm(precision, name, Trans::kNo, Trans::kNo, T, n_in, n_out, 1.0f, dy.rounded, n_out,
                 W, n_in, dx.rounded, n_in, epilogue);
      return;
    }
    if (dy.rounded != nullptr) {
      model_gemm(precision, name, Trans::kNo, Trans::kNo, T, n_in, n_out, 1.0f, dy.rounded, n_out,
                 W, n_in, 0.0f, dx.values, n_in, epilogue);
      return;
    }
  }
  linear_backward_input(precision, name, T, n_in, n_out, dy.values, W, dx, epilogue);
}

template <class Real>
void embed_norm_forward(int64_t T, int64_t d, const int32_t* tokens, const Real* embed, Real* x0,
                        Real* rstd0) {
  for_row_blocks("embed.norm", T, 3 * d, [&](int64_t, int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t)
      std::memcpy(&x0[t * d], embed + tokens[t] * d, d * sizeof(Real));
    rmsnorm_forward(&x0[t0 * d], d, &x0[t0 * d], d, &rstd0[t0], t1 - t0, d);
  });
}

template <class Real>
void embed_norm_backward(int64_t T, int64_t d, const int32_t* tokens, const Real* x0,
                         const Real* rstd0, Real* dx0, const Real* dx, Real* dnorm, Real* dembed) {
  for_row_blocks("embed.norm.bwd", T, 4 * d, [&](int64_t, int64_t t0, int64_t t1) {
    add_scaled((t1 - t0) * d, &dx0[t0 * d], Real(1), &dx[t0 * d], &dx0[t0 * d]);
    rmsnorm_backward(&x0[t0 * d], d, &rstd0[t0], &dx0[t0 * d], d, &dnorm[t0 * d], d, t1 - t0, d,
                     false);
  });
  for (int64_t t = 0; t < T; ++t) {
    Real* row = dembed + tokens[t] * d;
    const Real* src = &dnorm[t * d];
    add_scaled(d, row, Real(1), src, row);
  }
}

template <class Real>
void residual_mix_forward(int64_t T, int64_t d, const Real* x_prev, const Real* skip_src, Real skip,
                          const Real* x0, Real l0, Real l1, Real* x_in, Real* x_mix, Real* x_res,
                          Real* norm, Real* rstd, bf16* norm_rounded) {
  // Floats moved per row, for the profiler: the copy into x_res writes one row more.
  const int64_t per_row = (x_res != nullptr ? 4 : 3) * d + (norm_rounded != nullptr ? d / 2 : 0);
  for_row_blocks("residual_mix.norm1", T, per_row, [&](int64_t, int64_t t0, int64_t t1) {
    // A token's x_in, x_mix and norm rows are made here and stored for later (store_for_later):
    // the backward reads x_in and norm, attention's projection adds x_mix. The optional inputs
    // are tested once per row, not per element (a select between pointers inside the loop kept
    // it scalar: perf, 2026-11-26).
    std::vector<Real> rows(static_cast<size_t>(3 * d));
    Real* const in = rows.data();
    Real* const mix = in + d;
    Real* const y = mix + d;
    const size_t bytes = static_cast<size_t>(d) * sizeof(Real);
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t j = t * d;
      if (skip_src != nullptr) {
        add_scaled(d, x_prev + j, skip, skip_src + j, in);
      } else {
        std::memcpy(in, x_prev + j, bytes);
      }
      if (x0 != nullptr) {
        weighted_sum(d, l0, in, l1, x0 + j, mix);
      } else {
        std::memcpy(mix, in, bytes);
      }
      store_for_later(in, d, x_in + j);
      store_for_later(mix, d, x_mix + j);
      if (x_res != nullptr) std::memcpy(x_res + j, mix, bytes);  // norm2 reads it next
      if (norm != nullptr) {
        rmsnorm_forward(mix, d, y, d, &rstd[t], 1, d);
        store_for_later(y, d, norm + j);
        // Read next, by the qkv product: through the caches.
        round_rows(y, d, norm_rounded == nullptr ? nullptr : norm_rounded + j);
      }
    }
    streamed_stores_fence();
  });
}

template <class Real>
std::array<double, 3> residual_mix_backward(int64_t T, int64_t d, const Real* x_in, const Real* x0,
                                            const Real* skip_src, Real skip, Real l0, Real l1,
                                            Real* dx, Real* dx0, Real* dskip_src,
                                            bf16* dx_rounded) {
  std::vector<std::array<double, 3>> partial(static_cast<size_t>(row_blocks(T)));
  const int64_t per_row = 7 * d + (dx_rounded != nullptr ? d / 2 : 0);
  for_row_blocks("residual_mix.bwd", T, per_row, [&](int64_t b, int64_t t0, int64_t t1) {
    const int64_t j0 = t0 * d, len = (t1 - t0) * d;
    double dl0 = 0, dl1 = 0;
    if (x0 != nullptr) {  // without the mix, d(x_in) = d(x_mix): dx stays
      dl0 = dot_double(dx + j0, x_in + j0, len);
      dl1 = dot_double(dx + j0, x0 + j0, len);
      add_scaled(len, dx0 + j0, l1, dx + j0, dx0 + j0);
      scaled_copy(len, l0, dx + j0, dx + j0);  // d(x_in)
    }
    double dsw = 0;
    if (skip_src != nullptr) {
      dsw = dot_double(dx + j0, skip_src + j0, len);
      add_scaled(len, dskip_src + j0, skip, dx + j0, dskip_src + j0);
    }
    round_rows(dx + j0, len, dx_rounded == nullptr ? nullptr : dx_rounded + j0);
    partial[static_cast<size_t>(b)] = {dl0, dl1, dsw};
  });
  return sum_blocks(partial);
}

template <class Real>
void rmsnorm_rows_forward(const char* name, int64_t T, int64_t d, const Real* x, Real* y,
                          Real* rstd, Real* copy, bf16* y_rounded) {
  const int64_t per_row = (copy != nullptr ? 3 : 2) * d + (y_rounded != nullptr ? d / 2 : 0);
  for_row_blocks(name, T, per_row, [&](int64_t, int64_t t0, int64_t t1) {
    rmsnorm_forward(x + t0 * d, d, &y[t0 * d], d, &rstd[t0], t1 - t0, d);
    if (copy != nullptr) std::memcpy(&copy[t0 * d], &x[t0 * d], (t1 - t0) * d * sizeof(Real));
    round_rows(y + t0 * d, (t1 - t0) * d, y_rounded == nullptr ? nullptr : y_rounded + t0 * d);
  });
}

template <class Real>
void rmsnorm_rows_backward(const char* name, int64_t T, int64_t d, const Real* y, const Real* rstd,
                           const Real* dy, Real* dx, bool accumulate, bf16* dx_rounded) {
  const int64_t per_row = (accumulate ? 4 : 3) * d + (dx_rounded != nullptr ? d / 2 : 0);
  for_row_blocks(name, T, per_row, [&](int64_t, int64_t t0, int64_t t1) {
    rmsnorm_backward(&y[t0 * d], d, &rstd[t0], &dy[t0 * d], d, &dx[t0 * d], d, t1 - t0, d,
                     accumulate);
    round_rows(dx + t0 * d, (t1 - t0) * d, dx_rounded == nullptr ? nullptr : dx_rounded + t0 * d);
  });
}

template <class Real>
void add_rows(const char* name, int64_t T, int64_t d, const Real* ds, Real* dx, bf16* dx_rounded) {
  const int64_t per_row = 3 * d + (dx_rounded != nullptr ? d / 2 : 0);
  for_row_blocks(name, T, per_row, [&](int64_t, int64_t t0, int64_t t1) {
    add_scaled((t1 - t0) * d, &dx[t0 * d], Real(1), &ds[t0 * d], &dx[t0 * d]);
    round_rows(dx + t0 * d, (t1 - t0) * d, dx_rounded == nullptr ? nullptr : dx_rounded + t0 * d);
  });
}

template <class Real>
void qk_norm_rotary_v_mix_forward(int64_t T, const QkvShape& s, const RotaryTableT<Real>& rotary,
                                  const int64_t* pos, const int32_t* tokens, const Real* ve,
                                  Real la0, Real la1, const Real* raw, Real* rstd_qk, Real* qkv,
                                  bf16* qkv_rounded) {
  const int64_t row = s.row(), heads = s.Hq + s.Hkv, v_at = heads * s.D, kv = s.kv_width();
  const bool rounded_only = qkv_rounded != nullptr;
  if (!rounded_only && qkv == nullptr) {
    throw std::invalid_argument("qk_norm_rotary_v_mix_forward: neither qkv nor qkv_rounded set");
  }
  // Floats moved per row, for the profiler: raw read, the row written (in bf16: half).
  const int64_t per_row = rounded_only ? row + row / 2 : 2 * row;
  for_row_blocks("qk_norm.rotary.v_mix", T, per_row, [&](int64_t, int64_t t0, int64_t t1) {
    // Rounded only: each row is made in L1 here, then rounded out.
    std::vector<Real> scratch(static_cast<size_t>(rounded_only ? row : 0));
    for (int64_t t = t0; t < t1; ++t) {
      // The next token's value-embedding row, which no prefetcher can guess.
      if (ve != nullptr && t + 1 < t1) prefetch_lines(ve + tokens[t + 1] * kv, kv * sizeof(Real));
      const Real* in = &raw[t * row];
      Real* out = rounded_only ? scratch.data() : &qkv[t * row];

      // q and k: Hq + Hkv heads of D, normalised per head, then rotated.
      rmsnorm_forward(in, s.D, out, s.D, &rstd_qk[t * heads], heads, s.D);
      rotary.apply(out, heads, pos[t]);
      // v: the value-embedding mix (without value embeddings, la0·v + 0).
      weighted_sum(kv, la0, in + v_at, la1, ve == nullptr ? nullptr : ve + tokens[t] * kv,
                   out + v_at);
      // Read by attention's packers a head at a time, after the whole pass (in the speedrun,
      // 38 MB: beyond the caches): stored around them.
      if (rounded_only) store_rounded_for_later(out, row, qkv_rounded + t * row);
    }
    if (rounded_only) streamed_stores_fence();
  });
}

template <class Real>
std::array<double, 2> qk_norm_rotary_v_mix_backward(int64_t T, const QkvShape& s,
                                                    const RotaryTableT<Real>& rotary,
                                                    const int64_t* pos, const int32_t* tokens,
                                                    const Real* ve, Real* dve, Real la0, Real la1,
                                                    const Real* raw, const Real* rstd_qk,
                                                    Real* dqkv, bf16* dqkv_rounded) {
  const int64_t row = s.row(), heads = s.Hq + s.Hkv, v_at = heads * s.D, kv = s.kv_width();
  if constexpr (!std::is_same_v<Real, float>) {
    if (dqkv_rounded != nullptr) {
      throw std::invalid_argument(
          "qk_norm_rotary_v_mix_backward: a bf16 output (dqkv_rounded) is for float models");
    }
  }
  // Tokens repeat, so rows of the value embedding's gradient are shared: each element is
  // accumulated in token order, before the parallel pass rescales dv. Threads take disjoint
  // column ranges, so that order, and the bits, do not depend on the thread count.
  if (dve != nullptr) {
    // Reads dv (a row's last kv floats) and read-modify-writes a row of dve per token.
    ProfileScope scope("elementwise", "value_embed.bwd", {T, kv}, 0.0,
                       12.0 * static_cast<double>(T * kv));
    constexpr int64_t kColumns = 64;
    ThreadPool::current().parallel_for(
        static_cast<size_t>(ceil_div(kv, kColumns)), [&](size_t chunk, int) {
          const int64_t e0 = static_cast<int64_t>(chunk) * kColumns;
          const int64_t e1 = std::min(kv, e0 + kColumns);
          for (int64_t t = 0; t < T; ++t) {
            const Real* gv = &dqkv[t * row + v_at];
            Real* dvrow = dve + tokens[t] * kv;
            add_scaled(e1 - e0, dvrow + e0, la1, gv + e0, dvrow + e0);
          }
        });
  }
  std::vector<std::array<double, 2>> dla(static_cast<size_t>(row_blocks(T)));
  const bool rounded = dqkv_rounded != nullptr;
  const int64_t per_row = rounded ? 5 * row / 2 : 3 * row;  // floats moved, for the profiler
  for_row_blocks("qk_norm.rotary.v_mix.bwd", T, per_row, [&](int64_t b, int64_t t0, int64_t t1) {
    double dla0 = 0, dla1 = 0;
    // Rows reused by the block's tokens, which stay in L1: y, the token's normalised
    // q, k before RoPE, and, with a rounded output, the row being worked on (so that
    // dqkv's rows are only read, not written back to memory).
    std::vector<Real> rows(static_cast<size_t>(v_at + (rounded ? row : 0)));
    Real* const y = rows.data();
    for (int64_t t = t0; t < t1; ++t) {
      // The next token's value-embedding row, which no prefetcher can guess (asking for its
      // other rows as well, the sequential streams, made the pass slower: 145 → 157 ms).
      if (ve != nullptr && t + 1 < t1) prefetch_lines(ve + tokens[t + 1] * kv, kv * sizeof(Real));
      Real* drow = &dqkv[t * row];
      if (rounded) {
        std::memcpy(y + v_at, drow, static_cast<size_t>(row) * sizeof(Real));
        drow = y + v_at;
      }
      const Real* in = &raw[t * row];
      const Real* vrow = ve == nullptr ? nullptr : ve + tokens[t] * kv;
      dla0 += dot_double(drow + v_at, in + v_at, kv);
      if (vrow != nullptr) dla1 += dot_double(drow + v_at, vrow, kv);
      scaled_copy(kv, la0, drow + v_at, drow + v_at);
      // q, k: undo the rotation on the gradient, then the per-head norm.
      rotary.apply_inverse(drow, heads, pos[t]);
      // The norm's output before RoPE, as rmsnorm_forward made it: each head's raw values times
      // its stored rstd. (Undoing RoPE on the forward's rotated rows instead cost two rotations
      // a row, 9% of this pass, and gave these values only to within rounding.)
      for (int64_t h = 0; h < heads; ++h) {
        const Real r = rstd_qk[t * heads + h];
        for (int64_t e = h * s.D; e < (h + 1) * s.D; ++e) y[e] = in[e] * r;
      }
      rmsnorm_backward(y, s.D, &rstd_qk[t * heads], drow, s.D, drow, s.D, heads, s.D, false);
      // Read only by the products of the next two calls, after the caches have moved on.
      if (rounded) store_rounded_for_later(drow, row, &dqkv_rounded[t * row]);
    }
    dla[static_cast<size_t>(b)] = {dla0, dla1};
    if (rounded) streamed_stores_fence();
  });
  return sum_blocks(dla);
}

#define NANOGPT_INSTANTIATE_BLOCK_OPS(Real)                                                        \
  template void linear_forward<Real>(Precision, const char*, int64_t, int64_t, int64_t,            \
                                     const Real*, const Real*, Real, Real*,                        \
                                     const ProductEpilogue<Real>&, const PackedB*);                \
  template void linear_backward_weight<Real>(Precision, const char*, int64_t, int64_t, int64_t,    \
                                             const Real*, const Real*, Real*);                     \
  template void linear_backward_input<Real>(Precision, const char*, int64_t, int64_t, int64_t,     \
                                            const Real*, const Real*, Real*,                       \
                                            const ProductEpilogue<Real>&);                         \
  template void linear_backward_input<Real>(Precision, const char*, int64_t, int64_t, int64_t,     \
                                            const Real*, const Real*, ProductRows<Real>,           \
                                            const ProductEpilogue<Real>&);                         \
  template void linear_backward_weight<Real>(Precision, const char*, int64_t, int64_t, int64_t,    \
                                             ProductRows<Real>, const Real*, Real*);               \
  template void linear_backward_input<Real>(Precision, const char*, int64_t, int64_t, int64_t,     \
                                            ProductRows<Real>, const Real*, Real*);                \
  template void linear_backward_input<Real>(Precision, const char*, int64_t, int64_t, int64_t,     \
                                            ProductRows<Real>, const Real*, ProductRows<Real>,     \
                                            const ProductEpilogue<Real>&);                         \
  template void linear_forward<Real>(Precision, const char*, int64_t, int64_t, int64_t,            \
                                     const Real*, const Real*, ProductRows<Real>,                  \
                                     const ProductEpilogue<Real>&, const PackedB*);                \
  template void linear_forward<Real>(Precision, const char*, int64_t, int64_t, int64_t,            \
                                     ProductRows<Real>, const Real*, Real, Real*,                  \
                                     const ProductEpilogue<Real>&, const PackedB*);                \
  template void linear_backward_weight<Real>(Precision, const char*, int64_t, int64_t, int64_t,    \
                                             const Real*, ProductRows<Real>, Real*);               \
  template void linear_backward_weight<Real>(Precision, const char*, int64_t, int64_t, int64_t,    \
                                             ProductRows<Real>, ProductRows<Real>, Real*);         \
  template void linear_forward<Real>(Precision, const char*, int64_t, int64_t, int64_t,            \
                                     ProductRows<Real>, const Real*, ProductRows<Real>,            \
                                     const ProductEpilogue<Real>&, const PackedB*);                \
  template void embed_norm_forward<Real>(int64_t, int64_t, const int32_t*, const Real*, Real*,     \
                                         Real*);                                                   \
  template void embed_norm_backward<Real>(int64_t, int64_t, const int32_t*, const Real*,           \
                                          const Real*, Real*, const Real*, Real*, Real*);          \
  template void residual_mix_forward<Real>(int64_t, int64_t, const Real*, const Real*, Real,       \
                                           const Real*, Real, Real, Real*, Real*, Real*, Real*,    \
                                           Real*, bf16*);                                          \
  template std::array<double, 3> residual_mix_backward<Real>(int64_t, int64_t, const Real*,        \
                                                             const Real*, const Real*, Real, Real, \
                                                             Real, Real*, Real*, Real*, bf16*);    \
  template void rmsnorm_rows_forward<Real>(const char*, int64_t, int64_t, const Real*, Real*,      \
                                           Real*, Real*, bf16*);                                   \
  template void rmsnorm_rows_backward<Real>(const char*, int64_t, int64_t, const Real*,            \
                                            const Real*, const Real*, Real*, bool, bf16*);         \
  template void add_rows<Real>(const char*, int64_t, int64_t, const Real*, Real*, bf16*);          \
  template void qk_norm_rotary_v_mix_forward<Real>(                                                \
      int64_t, const QkvShape&, const RotaryTableT<Real>&, const int64_t*, const int32_t*,         \
      const Real*, Real, Real, const Real*, Real*, Real*, bf16*);                                  \
  template std::array<double, 2> qk_norm_rotary_v_mix_backward<Real>(                              \
      int64_t, const QkvShape&, const RotaryTableT<Real>&, const int64_t*, const int32_t*,         \
      const Real*, Real*, Real, Real, const Real*, const Real*, Real*, bf16*);

NANOGPT_INSTANTIATE_BLOCK_OPS(float)
NANOGPT_INSTANTIATE_BLOCK_OPS(double)

#undef NANOGPT_INSTANTIATE_BLOCK_OPS

}  // namespace nanogpt
