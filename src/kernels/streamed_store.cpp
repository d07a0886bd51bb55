#include "kernels/streamed_store.hpp"

#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "kernels/gemm/bf16_avx512.hpp"
#include "kernels/target.hpp"
#include "runtime/cpu_info.hpp"

NANOGPT_ALLOW_AVX512_INTRINSICS

namespace nanogpt {

namespace {

// How many of n elements of `size` bytes at out come before its first `align`-byte boundary.
int64_t head_before(const void* out, int64_t align, int64_t size, int64_t n) {
  const auto misaligned = static_cast<int64_t>(reinterpret_cast<uintptr_t>(out) % align);
  return std::min(n, misaligned == 0 ? 0 : (align - misaligned) / size);
}

NANOGPT_TARGET_AVX512 void copy_streamed_avx512(const float* x, int64_t n, float* out) {
  static_assert(alignof(float) == sizeof(float), "a float array reaches 64-byte alignment");
  const int64_t head = head_before(out, 64, sizeof(float), n);
  std::memcpy(out, x, static_cast<size_t>(head) * sizeof(float));
  int64_t i = head;
  for (; i + 16 <= n; i += 16) _mm512_stream_ps(out + i, _mm512_loadu_ps(x + i));
  std::memcpy(out + i, x + i, static_cast<size_t>(n - i) * sizeof(float));
}

// Whole 16-value chunks from the first 32-byte aligned output (each chunk's 32 bytes are then
// one aligned store).
NANOGPT_TARGET_AVX512 void round_to_bf16_streamed_avx512(const float* x, int64_t n, bf16* out) {
  static_assert(alignof(bf16) == sizeof(bf16), "a bf16 array reaches 32-byte alignment");
  const int64_t head = head_before(out, 32, sizeof(bf16), n);
  round_to_bf16(x, head, out);
  int64_t i = head;
  for (; i + 16 <= n; i += 16) {
    const __m512i hi = bf16_round_hi(_mm512_castps_si512(_mm512_loadu_ps(x + i)));
    _mm256_stream_si256(reinterpret_cast<__m256i*>(out + i),
                        _mm512_cvtepi32_epi16(_mm512_srli_epi32(hi, 16)));
  }
  round_to_bf16(x + i, n - i, out + i);
}

}  // namespace

void copy_streamed(const float* x, int64_t n, float* out) {
  if (cpu_info().avx512f) {
    copy_streamed_avx512(x, n, out);
    return;
  }
  std::memcpy(out, x, static_cast<size_t>(n) * sizeof(float));
}

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
