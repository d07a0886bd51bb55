#include "kernels/bf16.hpp"

#include <immintrin.h>

#include <algorithm>
#include <cstdint>

#include "kernels/gemm/bf16_avx512.hpp"
#include "kernels/target.hpp"
#include "runtime/cpu_info.hpp"

NANOGPT_ALLOW_AVX512_INTRINSICS

namespace nanogpt {

// The scalar rounding is integer arithmetic without branches: each clone vectorizes it.
NANOGPT_TARGET_CLONES void round_to_bf16(const float* x, int64_t n, bf16* out) {
  for (int64_t i = 0; i < n; ++i) out[i].bits = to_bf16_bits(x[i]);
}

namespace {

// Whole 16-value chunks from the first 32-byte aligned output (each chunk's 32 bytes are then
// one aligned store); the values before and after take the plain rounding.
NANOGPT_TARGET_AVX512 void round_to_bf16_streamed_avx512(const float* x, int64_t n, bf16* out) {
  static_assert(alignof(bf16) == sizeof(bf16), "a bf16 array reaches 32-byte alignment");
  const auto misaligned = static_cast<int64_t>(reinterpret_cast<uintptr_t>(out) % 32);
  const int64_t head =
      std::min(n, misaligned == 0 ? 0 : (32 - misaligned) / static_cast<int64_t>(sizeof(bf16)));
  for (int64_t i = 0; i < head; ++i) out[i].bits = to_bf16_bits(x[i]);
  int64_t i = head;
  for (; i + 16 <= n; i += 16) {
    const __m512i hi = bf16_round_hi(_mm512_castps_si512(_mm512_loadu_ps(x + i)));
    _mm256_stream_si256(reinterpret_cast<__m256i*>(out + i),
                        _mm512_cvtepi32_epi16(_mm512_srli_epi32(hi, 16)));
  }
  for (; i < n; ++i) out[i].bits = to_bf16_bits(x[i]);
}

}  // namespace

void round_to_bf16_streamed(const float* x, int64_t n, bf16* out) {
  if (cpu_info().avx512f) {
    round_to_bf16_streamed_avx512(x, n, out);
    return;
  }
  round_to_bf16(x, n, out);
}

void streamed_stores_fence() {
  _mm_sfence();
}

}  // namespace nanogpt
