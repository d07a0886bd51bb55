#include "optim/newton_schulz.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <utility>

#include "kernels/dot.hpp"
#include "kernels/matmul.hpp"
#include "optim/elementwise.hpp"
#include "runtime/error.hpp"
#include "runtime/profiler.hpp"
#include "runtime/thread_pool.hpp"

namespace nanogpt {

namespace {

// The iteration works on W = X for a wide X (rows ≤ cols) and on W = Xᵀ for a tall one. Rather
// than transposing, a tall X stays in its own layout and the products take the transpose:
// W·Wᵀ = Xᵀ·X and (B·W)ᵀ = X·Bᵀ. Only the product functions know about precision, so a
// reduced-precision path can replace them and keep the coefficient arithmetic.

// C = alpha·R·Rᵀ + s·D, k×k, where R is k×inner: the rows of X (ld ldx) or, with `columns`,
// its columns, and D (k×k, symmetric; nullptr: none) is added in the products' finish. Only the
// lower block triangle is multiplied out, then mirrored: nearly half the work of a full GEMM,
// and C comes out exactly symmetric. Each block of rows [i0, i1) is multiplied against the rows
// [0, i1), a prefix of one Rᵀ that is packed once for all blocks (into `packed`): packed per
// product, the prefixes took k/block/2 packings of R, as long as the products themselves on a
// tile unit (AMX, the speedrun model's shapes: 33% of the time packing, 29% multiplying).
void symmetric_product(Precision pr, const float* X, int64_t ldx, bool columns, int64_t k,
                       int64_t inner, float alpha, float* C, PackedB& packed,
                       const float* D = nullptr, float s = 0.0f) {
  const int64_t block = newton_schulz_block_rows(ThreadPool::current().size());
  // Rᵀ (inner × k): X itself when R is its columns, X transposed when R is its rows.
  pack_matmul_b(pr, columns ? Trans::kNo : Trans::kYes, inner, k, X, ldx, packed);
  for (int64_t i0 = 0; i0 < k; i0 += block) {
    const int64_t i1 = std::min(k, i0 + block);
    GemmEpilogue ep;
    ep.addend = D != nullptr ? D + i0 * k : nullptr;
    ep.ld_addend = k;
    ep.addend_scale = s;
    // No epilogue at all where there is nothing to add: a plain product may store its sums
    // straight into C (MicroKernel::fn_to_c) instead of finishing them through the accumulator.
    const GemmEpilogue* epilogue = D != nullptr ? &ep : nullptr;
    if (columns) {
      matmul_first_columns(Trans::kYes, i1 - i0, i1, alpha, X + i0, ldx, packed, 0.0f, C + i0 * k,
                           k, epilogue);
    } else {
      matmul_first_columns(Trans::kNo, i1 - i0, i1, alpha, X + i0 * ldx, ldx, packed, 0.0f,
                           C + i0 * k, k, epilogue);
    }
  }
  // The upper triangle from the lower, in 32×32 tiles so the column reads stay in L1.
  constexpr int64_t kTile = 32;
  for (int64_t ib = 0; ib < k; ib += kTile) {
    for (int64_t jb = ib; jb < k; jb += kTile) {
      for (int64_t i = ib; i < std::min(k, ib + kTile); ++i) {
        for (int64_t j = std::max(jb, i + 1); j < std::min(k, jb + kTile); ++j) {
          C[i * k + j] = C[j * k + i];
        }
      }
    }
  }
}

// The FLOPs of symmetric_product for a k×inner R in blocks of `block` rows: each block of rows
// [i0, i1) multiplied against rows [0, i1).
double symmetric_product_flops(int64_t k, int64_t inner, int64_t block) {
  double flops = 0;
  for (int64_t i0 = 0; i0 < k; i0 += block) {
    const int64_t i1 = std::min(k, i0 + block);
    flops +=
        2.0 * static_cast<double>(i1 - i0) * static_cast<double>(i1) * static_cast<double>(inner);
  }
  return flops;
}

// A = W·Wᵀ, k×k with k = min(rows, cols).
void gram(Precision pr, const float* x, int64_t rows, int64_t cols, float* A, PackedB& packed) {
  if (rows <= cols) {
    symmetric_product(pr, x, cols, /*columns=*/false, rows, cols, 1.0f, A, packed);
  } else {
    symmetric_product(pr, x, cols, /*columns=*/true, cols, rows, 1.0f, A, packed);
  }
}

// B = b·A + c·A·A (= c·A·Aᵀ, A being symmetric). The seed evaluates b·A + (c·A)·A; folding c
// into the product's alpha and adding b·A in its finish differ from that only in the last bit
// of each element, well below the order-of-summation differences of any two fp32 GEMMs.
void poly_of_gram(Precision pr, const float* A, int64_t k, float b, float c, float* B,
                  PackedB& packed) {
  symmetric_product(pr, A, k, /*columns=*/false, k, k, c, B, packed, A, b);
}

// x_next = a·x + B·W, in X's layout (a·x added in the product's finish).
void poly_times_x(Precision pr, const float* B, const float* x, int64_t rows, int64_t cols, float a,
                  float* x_next) {
  GemmEpilogue ep;
  ep.addend = x;
  ep.ld_addend = cols;
  ep.addend_scale = a;
  if (rows <= cols) {
    matmul(pr, Trans::kNo, Trans::kNo, rows, cols, rows, 1.0f, B, rows, x, cols, 0.0f, x_next, cols,
           &ep);
  } else {
    matmul(pr, Trans::kNo, Trans::kYes, rows, cols, cols, 1.0f, x, cols, B, cols, 0.0f, x_next,
           cols, &ep);
  }
}

// ‖G‖_F, accumulated in double per fixed chunk (in dot_double's fixed lanes) and combined in
// chunk order: more accurate than torch's fp32 reduction, and the same on any number of threads.
double frobenius_norm(const float* G, int64_t n, double* partial) {
  const size_t chunks = static_cast<size_t>(elementwise_chunks(n));
  for_each_chunk(n, [&](int64_t chunk, int64_t begin, int64_t end) {
    partial[static_cast<size_t>(chunk)] = dot_double(G + begin, G + begin, end - begin);
  });
  double total = 0.0;
  for (size_t c = 0; c < chunks; ++c) total += partial[c];
  return std::sqrt(total);
}

}  // namespace

int64_t newton_schulz_block_rows(int threads) {
  return threads <= 1 ? 96 : 192;
}

double newton_schulz_flops(int64_t rows, int64_t cols, int64_t steps, int threads) {
  const int64_t k = std::min(rows, cols), n = std::max(rows, cols);
  const int64_t block = newton_schulz_block_rows(threads);
  const double per_step = symmetric_product_flops(k, n, block)    // A = W·Wᵀ
                          + symmetric_product_flops(k, k, block)  // B += c·A·A
                          + 2.0 * static_cast<double>(k) * static_cast<double>(k) *
                                static_cast<double>(n);  // X' += B·W
  return static_cast<double>(steps) * per_step;
}

size_t NewtonSchulzWorkspace::bytes() const {
  return (x.capacity() + x_next.capacity() + gram.capacity() + poly.capacity() +
          staging.capacity()) *
             sizeof(float) +
         norm_partials.capacity() * sizeof(double) + packed.bytes();
}

void NewtonSchulzWorkspace::reserve(int64_t rows, int64_t cols) {
  const size_t n = static_cast<size_t>(rows * cols);
  const int64_t k = std::min(rows, cols);
  const size_t kk = static_cast<size_t>(k * k);
  if (x.size() < n) x.resize(n);
  if (x_next.size() < n) x_next.resize(n);
  if (gram.size() < kk) gram.resize(kk);
  if (poly.size() < kk) poly.resize(kk);
  const size_t chunks = static_cast<size_t>(elementwise_chunks(rows * cols));
  if (norm_partials.size() < chunks) norm_partials.resize(chunks);
}

void newton_schulz5(const float* G, int64_t rows, int64_t cols, int steps, float* out,
                    NewtonSchulzWorkspace& ws, const NewtonSchulzCoefficients& coeffs) {
  if (rows <= 0 || cols <= 0 || steps < 0) {
    throw Error("newton_schulz5: invalid arguments rows=" + std::to_string(rows) +
                " cols=" + std::to_string(cols) + " steps=" + std::to_string(steps) +
                " (need a non-empty matrix and steps >= 0)");
  }
  ProfileScope scope(
      "newton_schulz",
      ws.precision == Precision::kBf16 ? "newton_schulz5.bf16" : "newton_schulz5.fp32",
      {rows, cols, steps}, newton_schulz_flops(rows, cols, steps, ThreadPool::current().size()),
      4.0 * static_cast<double>(rows * cols) * (2.0 + 3.0 * steps));
  ws.reserve(rows, cols);
  const int64_t n = rows * cols;
  const int64_t k = std::min(rows, cols);
  float* x = ws.x.data();
  float* x_next = ws.x_next.data();
  float* A = ws.gram.data();
  float* B = ws.poly.data();

  // Frobenius norm ≥ spectral norm, so every singular value starts in [0, 1], where the
  // quintic pushes it towards 1. Division (not a reciprocal multiply) as the reference does.
  const float denom =
      static_cast<float>(frobenius_norm(G, n, ws.norm_partials.data())) + coeffs.eps;
  for_each_chunk(n, [&](int64_t, int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) x[i] = G[i] / denom;
  });

  for (int step = 0; step < steps; ++step) {
    // The last step writes the result where it is wanted (G, if `out` is G, is read by now).
    float* next = step + 1 == steps ? out : x_next;
    gram(ws.precision, x, rows, cols, A, ws.packed);
    poly_of_gram(ws.precision, A, k, coeffs.b, coeffs.c, B, ws.packed);
    poly_times_x(ws.precision, B, x, rows, cols, coeffs.a, next);
    std::swap(x, x_next);
  }
  if (steps == 0) std::memcpy(out, x, static_cast<size_t>(n) * sizeof(float));
}

}  // namespace nanogpt
