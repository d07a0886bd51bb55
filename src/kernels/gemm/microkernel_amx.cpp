// bf16 products with AMX: a 32×32 fp32 micro-tile held in four 16×16 C tiles (tmm0..3), two A
// tiles (tmm4, 5: 16 rows × 32 k) and two B tiles (tmm6, 7: 16 k pairs × 16 columns, VNNI)
// per 32-deep k step, and four TDPBF16PS — each loaded tile feeds two products.
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "kernels/gemm/epilogue.hpp"
#include "kernels/gemm/microkernel.hpp"
#include "kernels/gemm/pack.hpp"

// GCC 12's AVX-512 intrinsics start from self-initialised "undefined" vectors, which
// -Wmaybe-uninitialized reports once they are inlined into target("avx512f") functions.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace nanogpt {

namespace {

constexpr int64_t kMR = 32, kNR = 32, kKStep = 32;
constexpr int64_t kTileBytes = 64;  // one tile row: 16 fp32, or 32 bf16

// The 64-byte operand of LDTILECFG, palette 1.
struct alignas(64) TileConfig {
  uint8_t palette = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

__attribute__((target("amx-tile"))) void begin_task() {
  TileConfig config;
  for (int t = 0; t < 8; ++t) {
    config.colsb[t] = kTileBytes;
    config.rows[t] = 16;
  }
  // GCC 12's _tile_loadconfig does not tell the optimiser that it reads the config, which
  // then drops the stores that fill it in; the asm operand does.
  __asm__ volatile("ldtilecfg %0" : : "m"(config));
}

// Releasing the tiles returns the thread to the initial state, so a context switch need not
// save 8 KiB of tile data for a thread that is done with them.
__attribute__((target("amx-tile"))) void end_task() {
  _tile_release();
}

__attribute__((target("amx-tile,amx-bf16"))) void kernel(int64_t kc, const void* a_v,
                                                         const void* b_v, float* acc,
                                                         int64_t ld_acc, bool accumulate) {
  const char* a = static_cast<const char*>(a_v);
  const char* b = static_cast<const char*>(b_v);
  const int64_t ld = ld_acc * static_cast<int64_t>(sizeof(float));
  char* c = reinterpret_cast<char*>(acc);
  // GCC's tile intrinsics are asm statements without memory operands: fence the accesses
  // they make to the packed panels and to acc from the code around.
  __asm__ volatile("" ::: "memory");
  if (accumulate) {
    _tile_loadd(0, c, ld);
    _tile_loadd(1, c + 64, ld);
    _tile_loadd(2, c + 16 * ld, ld);
    _tile_loadd(3, c + 16 * ld + 64, ld);
  } else {
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
  }
  // One k step is 2 KiB of A (two tiles) and 2 KiB of B.
  for (int64_t s = 0; s < kc / kKStep; ++s) {
    const char* as = a + s * 2048;
    const char* bs = b + s * 2048;
    _tile_loadd(4, as, kTileBytes);
    _tile_loadd(6, bs, kTileBytes);
    _tile_loadd(5, as + 1024, kTileBytes);
    _tile_loadd(7, bs + 1024, kTileBytes);
    _tile_dpbf16ps(0, 4, 6);
    _tile_dpbf16ps(1, 4, 7);
    _tile_dpbf16ps(2, 5, 6);
    _tile_dpbf16ps(3, 5, 7);
  }
  _tile_stored(0, c, ld);
  _tile_stored(1, c + 64, ld);
  _tile_stored(2, c + 16 * ld, ld);
  _tile_stored(3, c + 16 * ld + 64, ld);
  __asm__ volatile("" ::: "memory");
}

layout::Layout a_layout(int64_t rows, int64_t k) {
  return layout::amx_a(rows, k);
}
layout::Layout b_layout(int64_t k, int64_t cols) {
  return layout::amx_b(k, cols);
}

}  // namespace

MicroKernel microkernel_amx() {
  MicroKernel m{"amx", kMR, kNR, kernel};
  m.level = IsaLevel::kAmx;
  m.k_step = kKStep;
  m.packed_bytes = 2;
  m.bf16_products = true;
  m.a_layout = a_layout;
  m.b_layout = b_layout;
  m.pack_a[1] = pack::amx_pack_a_f32;
  m.pack_a[2] = pack::amx_pack_a_bf16;
  m.pack_b[1] = pack::amx_pack_b_f32;
  m.pack_b[2] = pack::amx_pack_b_bf16;
  m.finish = finish_tile_avx512;
  m.stream = stream_tile_avx512;
  m.begin_task = begin_task;
  m.end_task = end_task;
  return m;
}

}  // namespace nanogpt
