// Finishing a tile of C from its fp32 accumulator: C = alpha·acc + beta·C, then the fused
// epilogue (relu² and the bf16 cast) on the same values while the tile is in cache.
#pragma once

#include <cstdint>

#include "kernels/gemm.hpp"

namespace nanogpt {

void finish_tile_scalar(const float* acc, int64_t ld_acc, int64_t rows, int64_t cols, float alpha,
                        float beta, float* c, int64_t ldc, const GemmEpilogue* ep, int64_t row,
                        int64_t col);
void finish_tile_avx2(const float* acc, int64_t ld_acc, int64_t rows, int64_t cols, float alpha,
                      float beta, float* c, int64_t ldc, const GemmEpilogue* ep, int64_t row,
                      int64_t col);
// Needs AVX-512F and BW.
void finish_tile_avx512(const float* acc, int64_t ld_acc, int64_t rows, int64_t cols, float alpha,
                        float beta, float* c, int64_t ldc, const GemmEpilogue* ep, int64_t row,
                        int64_t col);

// finish_tile_avx512 storing C's full 16-value rows with non-temporal stores, for a C whose
// rows are 64-byte aligned, beta = 0, too large for the caches: it is then written without first
// being read (no read-for-ownership), halving its memory traffic. Same values. The caller fences
// (_mm_sfence) before C is read by another thread.
void stream_tile_avx512(const float* acc, int64_t ld_acc, int64_t rows, int64_t cols, float alpha,
                        float beta, float* c, int64_t ldc, const GemmEpilogue* ep, int64_t row,
                        int64_t col);

}  // namespace nanogpt
