// Newton–Schulz orthogonalization, the seed's zeropower_via_newtonschulz5: maps G = U·S·Vᵀ to
// about U·S'·Vᵀ with the singular values S' pushed into roughly [0.5, 1.5], using nothing but
// matrix products. Muon applies it to every momentum-smoothed gradient of a hidden matrix.
//
//   X = G / (‖G‖_F + eps)              (Frobenius norm ≥ spectral norm, so σ(X) ≤ 1)
//   steps times:  A = X·Xᵀ;  B = b·A + c·A·A;  X = a·X + B·X
//
// computed on Gᵀ when G has more rows than columns, so the Gram matrix A is the smaller
// min(rows, cols)² one. The quintic's coefficients maximise its slope at zero (small singular
// values grow ~a× per step) at the price of not converging exactly to 1.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/matmul.hpp"
#include "runtime/aligned_memory.hpp"

namespace nanogpt {

// The seed's values. float because that is the precision in which they meet the matrices.
struct NewtonSchulzCoefficients {
  float a = 3.4445f;
  float b = -4.7750f;
  float c = 2.0315f;
  float eps = 1e-7f;  // keeps a zero gradient from dividing by zero
};

// Scratch for newton_schulz5, grown on first use and then reused, so a training step that
// orthogonalizes the same shapes every time does not allocate. Contents between calls are
// meaningless. One workspace per concurrent caller.
struct NewtonSchulzWorkspace {
  AlignedVector<float> x, x_next;  // the iterate, in G's own rows×cols layout
  AlignedVector<float> gram;       // A, min(rows, cols)²
  AlignedVector<float> poly;       // B, min(rows, cols)²
  PackedB packed;  // the iterate, then A, packed for the Gram products (kernels/matmul.hpp)
  std::vector<double> norm_partials;  // per-chunk sums of squares
  // Not used by newton_schulz5: lets Muon stage its Nesterov gradient and receive the update
  // in place, so one workspace is all the scratch an optimizer step needs.
  AlignedVector<float> staging;
  // bf16: the products take bf16-rounded operands (fp32 accumulation), as the seed's
  // bf16 iteration does; the iterate and the polynomial coefficients stay fp32.
  Precision precision = Precision::kFp32;

  // Grows the buffers to fit a rows×cols matrix (never shrinks); `packed` grows as it is used.
  void reserve(int64_t rows, int64_t cols);
  // Memory held, all of it.
  size_t bytes() const;
};

// out = NS^steps(G), both rows×cols row-major fp32. `out` may be `G` (G is fully read before
// out is written). The products run through gemm on ThreadPool::current(); every other
// operation is split over fixed chunks, so the result is bitwise independent of thread count.
void newton_schulz5(const float* G, int64_t rows, int64_t cols, int steps, float* out,
                    NewtonSchulzWorkspace& ws, const NewtonSchulzCoefficients& coeffs = {});

// Rows per product of the Gram matrix and its square, which are symmetric: each block of rows is
// multiplied against the rows up to its end and the upper triangle mirrored, so smaller blocks
// skip more of the work ((blocks − 1)/(2·blocks) of it) in shorter products. On a pool of
// `threads`: one thread (Muon orthogonalizes each matrix on a serial pool) takes 96 rows, eight
// tiles of the AVX512-BF16 kernel; more take 192, two 96-row parts per product so two threads
// stay busy. Measured (AMD EPYC Zen 5, bf16, 5 steps, quartile of 7–30 calls, the same bits
// either way): on one thread 96 rows against 192 took 7.76 against 8.20 ms for 256×1024, 7.33
// against 7.91 for 1024×256, 2.52 against 2.72 for 256×256, 183 against 190 for 768×3072, 59.0
// against 61.9 for 768×768 (128 and 64 rows in between or slower); on two threads 96 rows took
// 99.6 against 93.9 ms for 768×3072.
int64_t newton_schulz_block_rows(int threads);

// The FLOPs newton_schulz5 multiplies out on one rows×cols matrix on a pool of `threads` (a
// multiply-add is 2): per iteration the Gram matrix and its square block-triangularly (in
// blocks of newton_schulz_block_rows(threads)), then B·W in full. For the profiler and
// `nanogpt bench train`'s FLOP count (Muon's matrices run on one thread each, the default).
double newton_schulz_flops(int64_t rows, int64_t cols, int64_t steps, int threads = 1);

}  // namespace nanogpt
