// The compiler- and x86-specific spellings the kernels need, in one place. The library is built
// without -march, so code for an ISA is compiled for it function by function (a target
// attribute) and chosen at run time: by the GEMM's kernel table (gemm/microkernel_dispatch.cpp)
// or by the loader for target_clones. Porting to another compiler or architecture starts here.
#pragma once

#include <immintrin.h>

#include <cstdint>

#include "runtime/spin_pause.hpp"  // spin_pause(), for the kernels' spin-waits

// A function compiled for the named ISA extensions; call it only where cpu_info() has them.
#define NANOGPT_TARGET_AVX2 __attribute__((target("avx2,fma")))
#define NANOGPT_TARGET_AVX512 __attribute__((target("avx512f")))
#define NANOGPT_TARGET_AVX512BW __attribute__((target("avx512f,avx512bw,avx512vl")))
#define NANOGPT_TARGET_AVX512BF16 __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16")))
#define NANOGPT_TARGET_AMX_TILE __attribute__((target("amx-tile")))
#define NANOGPT_TARGET_AMX __attribute__((target("amx-tile,amx-bf16")))
namespace nanogpt {
// The mask of the first n of a vector's 16 lanes (all for n ≥ 16, none for n ≤ 0): the part of
// a loop's last vector inside its row. Integer arithmetic, usable from any target.
constexpr __mmask16 first_lanes(int64_t n) {
  return n >= 16  ? static_cast<__mmask16>(0xFFFF)
         : n <= 0 ? static_cast<__mmask16>(0)
                  : static_cast<__mmask16>((1u << n) - 1);
}
// The same for a vector's 32 lanes of 16 bits (bf16 loads).
constexpr __mmask32 first_lanes32(int64_t n) {
  return n >= 32  ? static_cast<__mmask32>(0xFFFFFFFFu)
         : n <= 0 ? static_cast<__mmask32>(0)
                  : static_cast<__mmask32>((1u << n) - 1);
}
}  // namespace nanogpt
// Helpers of such functions, inlined into them (a target helper that is not inlined costs a
// call per vector).
#define NANOGPT_ALWAYS_INLINE __attribute__((always_inline)) inline
// A loop compiled for AVX-512, for AVX2 (Haswell) and portably, the best picked on first call,
// for element-wise loops with a fixed summation order. The clones give the same bits only where
// the file is built with -ffp-contract=off (CMakeLists.txt: the element-wise kernels); elsewhere
// (the softmax loops of attention and the fused loss, decoding, sampling) GCC fuses a·b + c in
// the AVX2 and AVX-512 clones, which then differ from the baseline's in the last bits. Turning
// that off there cost 6–15% of a training step (2026-11-28); explicit FMAs would keep both.
#define NANOGPT_TARGET_CLONES __attribute__((target_clones("avx512f", "arch=haswell", "default")))
// GCC 12's AVX-512 intrinsics start from self-initialised "undefined" vectors, which
// -Wmaybe-uninitialized reports once they are inlined into target("avx512f") functions; files
// of AVX-512 code say this once, after their includes (clang has no such warning).
#if defined(__clang__)
#define NANOGPT_ALLOW_AVX512_INTRINSICS
#else
#define NANOGPT_ALLOW_AVX512_INTRINSICS _Pragma("GCC diagnostic ignored \"-Wmaybe-uninitialized\"")
#endif
