// The fused loss's row loops (fused_linear_cross_entropy.cpp) on 16 lanes of AVX-512, for the
// runs that use them most: exp(-z/divisor) in place, the row's Σ exp(y − m) keeping q and dy/dz,
// and the gradient rounded to bf16. GCC compiles the scalar loops' exponential under masks and
// keeps the partial sums on the stack; these give the same bits (the same operations, which GCC
// contracts alike: kernels/exp_approx_avx512.hpp) in less time. The fused loss takes them where
// the CPU has AVX-512 (and the gradient is not rounded to FP8); tests compare both ways.
#pragma once

#include <cstdint>

#include "kernels/bf16.hpp"

namespace nanogpt {

// v[j] = exp_approx(−(v[j]·inv_divisor)).
void exp_neg_scaled_row_avx512(float* v, int64_t n, float inv_divisor);

// Σ_j q_j with q_j = exp_approx(y_j − m), y_j = softcap·(1/(1 + v_j)) when capped, else v_j; in
// 16 lanes added pairwise at the end. Where keep_q is given, keep_q[j] = q_j and, capped,
// keep_dydz[j] = slope·(v_j·σ_j)·σ_j with σ_j = 1/(1 + v_j).
float sum_exp_row_avx512(const float* v, int64_t n, float m, bool capped, float softcap,
                         float slope, float* keep_q, float* keep_dydz);

// g[j] = bf16((q_j·inv_s − [j == target])·dydz_j·weight), dydz_j = dydz[j], or uncapped_slope
// where dydz is null.
void grad_row_bf16_avx512(const float* q, const float* dydz, float uncapped_slope, float inv_s,
                          float weight, int64_t target, int64_t n, bf16* g);

// Whether the fused loss takes these where the CPU has AVX-512 (true unless set); returns the
// previous value. For tests, which compare them with the loops compiled per ISA.
bool set_loss_rows_avx512(bool enabled);
bool loss_rows_avx512();

}  // namespace nanogpt
