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
  AlignedVector<float> x, x_next;     // the iterate, in G's own rows×cols layout
  AlignedVector<float> gram;          // A, min(rows, cols)²
  AlignedVector<float> poly;          // B, min(rows, cols)²
  std::vector<double> norm_partials;  // per-chunk sums of squares
  // Not used by newton_schulz5: lets Muon stage its Nesterov gradient and receive the update
  // in place, so one workspace is all the scratch an optimizer step needs.
  AlignedVector<float> staging;
  // bf16: the products take bf16-rounded operands (fp32 accumulation), as the seed's
  // bf16 iteration does; the iterate and the polynomial coefficients stay fp32.
  Precision precision = Precision::kFp32;

  // Grows the buffers to fit a rows×cols matrix (never shrinks).
  void reserve(int64_t rows, int64_t cols);
};

// out = NS^steps(G), both rows×cols row-major fp32. `out` may be `G` (G is fully read before
// out is written). The products run through gemm on ThreadPool::current(); every other
// operation is split over fixed chunks, so the result is bitwise independent of thread count.
void newton_schulz5(const float* G, int64_t rows, int64_t cols, int steps, float* out,
                    NewtonSchulzWorkspace& ws, const NewtonSchulzCoefficients& coeffs = {});

// The FLOPs newton_schulz5 multiplies out on one rows×cols matrix (a multiply-add is 2): per
// iteration the Gram matrix and its square block-triangularly (blocks of 192 rows), then B·W in
// full. For the profiler and `nanogpt bench train`'s FLOP count.
double newton_schulz_flops(int64_t rows, int64_t cols, int64_t steps);

}  // namespace nanogpt
