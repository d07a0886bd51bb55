// bf16 products with AMX: a 32×32 fp32 micro-tile held in four 16×16 C tiles (tmm0..3), two A
// tiles (tmm4, 5: 16 rows × 32 k) and two B tiles (tmm6, 7: 16 k pairs × 16 columns, VNNI)
// per 32-deep k step, and four TDPBF16PS — each loaded tile feeds two products.
#include <cstdint>
#include <cstring>

#include "kernels/gemm/epilogue.hpp"
#include "kernels/gemm/microkernel.hpp"
#include "kernels/gemm/pack.hpp"
#include "kernels/target.hpp"
#include "runtime/cpu_info.hpp"

NANOGPT_ALLOW_AVX512_INTRINSICS

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

NANOGPT_TARGET_AMX_TILE void begin_task() {
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
NANOGPT_TARGET_AMX_TILE void end_task() {
  _tile_release();
}

// The micro-kernel, written once over a tile unit: Tiles is the hardware (HardwareTiles) or, for
// tests on CPUs without AMX, a software model of it (EmulatedTiles), so the addressing of the
// packed panels and of the accumulator is the same code either way.
// Compiled for AMX whichever unit it drives (clang's tile intrinsics are target builtins); the
// model only uses scalar code, and tests run it only on CPUs with AVX-512 BF16.

// A's two tiles per k step are found through ATiles: a packed micro-panel (PackedA: 2 KiB per k
// step, the second tile 1 KiB after the first, rows 64 bytes apart) or bf16 rows read where they
// are stored (RowsA: 64 bytes per k step, the second tile 16 rows down, rows lda apart), which
// is the packed panel's own tile layout without the copy.
struct PackedA {
  static int64_t step(int64_t) { return 2048; }
  static int64_t row(int64_t) { return kTileBytes; }
  static int64_t second(int64_t) { return 1024; }
};
struct RowsA {
  static int64_t step(int64_t) { return kTileBytes; }
  static int64_t row(int64_t lda_bytes) { return lda_bytes; }
  static int64_t second(int64_t lda_bytes) { return 16 * lda_bytes; }
};

// The sum is carried in from acc (when accumulating) and stored to out: acc itself, or C for
// a tile whose finish would copy it unchanged (fn_to_c).
template <class Tiles, class ATiles>
NANOGPT_TARGET_AMX NANOGPT_ALWAYS_INLINE void tile_kernel(int64_t kc, const void* a_v,
                                                          int64_t lda_bytes, const void* b_v,
                                                          const float* acc, int64_t ld_acc,
                                                          bool accumulate, float* out,
                                                          int64_t ld_out) {
  const char* a = static_cast<const char*>(a_v);
  const int64_t a_step = ATiles::step(lda_bytes), a_row = ATiles::row(lda_bytes);
  const int64_t a_second = ATiles::second(lda_bytes);
  const char* b = static_cast<const char*>(b_v);
  const int64_t ld = ld_acc * static_cast<int64_t>(sizeof(float));
  const char* c = reinterpret_cast<const char*>(acc);
  // GCC's tile intrinsics are asm statements without memory operands: fence the accesses
  // they make to the packed panels, acc and out from the code around.
  __asm__ volatile("" ::: "memory");
  if (accumulate) {
    Tiles::load(0, c, ld);
    Tiles::load(1, c + 64, ld);
    Tiles::load(2, c + 16 * ld, ld);
    Tiles::load(3, c + 16 * ld + 64, ld);
  } else {
    Tiles::zero(0);
    Tiles::zero(1);
    Tiles::zero(2);
    Tiles::zero(3);
  }
  // One k step is two tiles of A (1 KiB each) and 2 KiB of B.
  for (int64_t s = 0; s < kc / kKStep; ++s) {
    const char* as = a + s * a_step;
    const char* bs = b + s * 2048;
    Tiles::load(4, as, a_row);
    Tiles::load(6, bs, kTileBytes);
    Tiles::load(5, as + a_second, a_row);
    Tiles::load(7, bs + 1024, kTileBytes);
    Tiles::dpbf16(0, 4, 6);
    Tiles::dpbf16(1, 4, 7);
    Tiles::dpbf16(2, 5, 6);
    Tiles::dpbf16(3, 5, 7);
  }
  char* o = reinterpret_cast<char*>(out);
  const int64_t ldo = ld_out * static_cast<int64_t>(sizeof(float));
  Tiles::store(0, o, ldo);
  Tiles::store(1, o + 64, ldo);
  Tiles::store(2, o + 16 * ldo, ldo);
  Tiles::store(3, o + 16 * ldo + 64, ldo);
  __asm__ volatile("" ::: "memory");
}

// fn_to_c over either form of A (lda_bytes 0: packed).
template <class Tiles>
NANOGPT_TARGET_AMX NANOGPT_ALWAYS_INLINE void tile_kernel_to_c(int64_t kc, const void* a,
                                                               int64_t lda_bytes, const void* b,
                                                               const float* acc, int64_t ld_acc,
                                                               bool accumulate, float* c,
                                                               int64_t ldc) {
  if (lda_bytes == 0) {
    tile_kernel<Tiles, PackedA>(kc, a, 0, b, acc, ld_acc, accumulate, c, ldc);
  } else {
    tile_kernel<Tiles, RowsA>(kc, a, lda_bytes, b, acc, ld_acc, accumulate, c, ldc);
  }
}

// GCC's tile intrinsics paste the tile number into the instruction's text, so it must be a
// literal: a switch per operation, which constant arguments fold away.
#define NANOGPT_TILE_CASES(op) \
  switch (t) {                 \
    case 0:                    \
      op(0);                   \
      break;                   \
    case 1:                    \
      op(1);                   \
      break;                   \
    case 2:                    \
      op(2);                   \
      break;                   \
    case 3:                    \
      op(3);                   \
      break;                   \
    case 4:                    \
      op(4);                   \
      break;                   \
    case 5:                    \
      op(5);                   \
      break;                   \
    case 6:                    \
      op(6);                   \
      break;                   \
    default:                   \
      op(7);                   \
      break;                   \
  }

struct HardwareTiles {
#define NANOGPT_AMX NANOGPT_TARGET_AMX __attribute__((always_inline)) static inline
  NANOGPT_AMX void load(int t, const void* p, int64_t stride){
#define NANOGPT_LOAD(n) _tile_loadd(n, p, stride)
      NANOGPT_TILE_CASES(NANOGPT_LOAD)
#undef NANOGPT_LOAD
  } NANOGPT_AMX void store(int t, void* p, int64_t stride){
#define NANOGPT_STORE(n) _tile_stored(n, p, stride)
      NANOGPT_TILE_CASES(NANOGPT_STORE)
#undef NANOGPT_STORE
  } NANOGPT_AMX void zero(int t){
#define NANOGPT_ZERO(n) _tile_zero(n)
      NANOGPT_TILE_CASES(NANOGPT_ZERO)
#undef NANOGPT_ZERO
  }  // Only the operand combinations the kernel uses; any other is a bug (constant arguments fold
  // this to the one instruction).
  NANOGPT_AMX void dpbf16(int c, int a, int b) {
    if (c == 0 && a == 4 && b == 6) {
      _tile_dpbf16ps(0, 4, 6);
    } else if (c == 1 && a == 4 && b == 7) {
      _tile_dpbf16ps(1, 4, 7);
    } else if (c == 2 && a == 5 && b == 6) {
      _tile_dpbf16ps(2, 5, 6);
    } else if (c == 3 && a == 5 && b == 7) {
      _tile_dpbf16ps(3, 5, 7);
    } else {
      __builtin_trap();
    }
  }
#undef NANOGPT_AMX
};
#undef NANOGPT_TILE_CASES

NANOGPT_TARGET_AMX void kernel(int64_t kc, const void* a, const void* b, float* acc, int64_t ld_acc,
                               bool accumulate) {
  tile_kernel<HardwareTiles, PackedA>(kc, a, 0, b, acc, ld_acc, accumulate, acc, ld_acc);
}

NANOGPT_TARGET_AMX void kernel_a_rows(int64_t kc, const void* a, int64_t lda_bytes, const void* b,
                                      float* acc, int64_t ld_acc, bool accumulate) {
  tile_kernel<HardwareTiles, RowsA>(kc, a, lda_bytes, b, acc, ld_acc, accumulate, acc, ld_acc);
}

NANOGPT_TARGET_AMX void kernel_to_c(int64_t kc, const void* a, int64_t lda_bytes, const void* b,
                                    const float* acc, int64_t ld_acc, bool accumulate, float* c,
                                    int64_t ldc) {
  tile_kernel_to_c<HardwareTiles>(kc, a, lda_bytes, b, acc, ld_acc, accumulate, c, ldc);
}

// A software model of the eight tiles as begin_task configures them (16 rows of 64 bytes), with
// TDPBF16PS as Intel's SDM defines it: for each row m of C, each k pair and each column n,
// C[m][n] += A[m][2k]·B[k][2n] + A[m][2k+1]·B[k][2n+1], the products and sums in fp32 in that
// order.
struct EmulatedTiles {
  struct Tile {
    alignas(64) uint8_t bytes[16][64];
  };
  static Tile* tiles() {
    thread_local Tile t[8];
    return t;
  }
  static void load(int t, const void* p, int64_t stride) {
    for (int r = 0; r < 16; ++r) {
      std::memcpy(tiles()[t].bytes[r], static_cast<const char*>(p) + r * stride, 64);
    }
  }
  static void store(int t, void* p, int64_t stride) {
    for (int r = 0; r < 16; ++r) {
      std::memcpy(static_cast<char*>(p) + r * stride, tiles()[t].bytes[r], 64);
    }
  }
  static void zero(int t) { std::memset(tiles()[t].bytes, 0, sizeof(Tile::bytes)); }
  static void dpbf16(int c, int a, int b) {
    for (int m = 0; m < 16; ++m) {
      float row[16];
      std::memcpy(row, tiles()[c].bytes[m], sizeof row);
      bf16 av[32];
      std::memcpy(av, tiles()[a].bytes[m], sizeof av);
      for (int k = 0; k < 16; ++k) {
        bf16 bv[32];
        std::memcpy(bv, tiles()[b].bytes[k], sizeof bv);
        for (int n = 0; n < 16; ++n) {
          row[n] += to_float(av[2 * k]) * to_float(bv[2 * n]);
          row[n] += to_float(av[2 * k + 1]) * to_float(bv[2 * n + 1]);
        }
      }
      std::memcpy(tiles()[c].bytes[m], row, sizeof row);
    }
  }
};

NANOGPT_TARGET_AMX void emulated_kernel(int64_t kc, const void* a, const void* b, float* acc,
                                        int64_t ld_acc, bool accumulate) {
  tile_kernel<EmulatedTiles, PackedA>(kc, a, 0, b, acc, ld_acc, accumulate, acc, ld_acc);
}

NANOGPT_TARGET_AMX void emulated_kernel_a_rows(int64_t kc, const void* a, int64_t lda_bytes,
                                               const void* b, float* acc, int64_t ld_acc,
                                               bool accumulate) {
  tile_kernel<EmulatedTiles, RowsA>(kc, a, lda_bytes, b, acc, ld_acc, accumulate, acc, ld_acc);
}

NANOGPT_TARGET_AMX void emulated_kernel_to_c(int64_t kc, const void* a, int64_t lda_bytes,
                                             const void* b, const float* acc, int64_t ld_acc,
                                             bool accumulate, float* c, int64_t ldc) {
  tile_kernel_to_c<EmulatedTiles>(kc, a, lda_bytes, b, acc, ld_acc, accumulate, c, ldc);
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
  m.fn_a_rows = kernel_a_rows;
  m.fn_to_c = kernel_to_c;
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
  // A 32×32 tile, 32 deep per step: square tasks of four tiles a side.
  m.blocking = {128, 128, 512};
  m.runnable = [] { return isa_available(IsaLevel::kAmx); };
  return m;
}

MicroKernel microkernel_amx_emulated() {
  MicroKernel m = microkernel_amx();
  m.isa = "amx_emulated";
  m.fn = emulated_kernel;
  m.fn_a_rows = emulated_kernel_a_rows;
  m.fn_to_c = emulated_kernel_to_c;
  m.begin_task = nullptr;
  m.end_task = nullptr;
  // The model needs no tile unit, only the AVX-512 its packers and epilogue use.
  m.runnable = [] {
    const CpuInfo& cpu = cpu_info();
    return isa_available(IsaLevel::kAvx512) && cpu.avx512_bf16 && cpu.avx512bw && cpu.avx512vl;
  };
  return m;
}

}  // namespace nanogpt
