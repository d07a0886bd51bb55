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

// C = alpha·acc for whole tiles (cols a multiple of 16) of a C whose rows are 64-byte aligned,
// with non-temporal stores: a C too large for the caches is then written without first being
// read (no read-for-ownership), halving its memory traffic. Same values as finish_tile_avx512.
// The caller fences (_mm_sfence) before C is read by another thread.
void stream_tile_avx512(const float* acc, int64_t ld_acc, int64_t rows, int64_t cols, float alpha,
                        float* c, int64_t ldc);

}  // namespace nanogpt
