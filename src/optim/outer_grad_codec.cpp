#include "optim/outer_grad_codec.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/bf16.hpp"
#include "kernels/fp4.hpp"
#include "kernels/fp8.hpp"
#include "optim/elementwise.hpp"
#include "runtime/error.hpp"

namespace nanogpt {

namespace {

constexpr int kScaleBias = 127;
constexpr int kMinScaleExponent = -126;  // 2^e stays a normal float32
constexpr int kMaxScaleExponent = 127;
constexpr float kLargest = 1e36f;

float power_of_two(int e) {
  return std::bit_cast<float>(static_cast<uint32_t>(e + 127) << 23);
}

// The smallest e with amax / 2^e <= format_max.
int scale_exponent(float amax, float format_max) {
  if (!(amax > 0)) return kMinScaleExponent;
  int e = 0;
  const float m = std::frexp(amax / format_max, &e);  // amax/max = m·2^e, m in [0.5, 1)
  if (m == 0.5f) e -= 1;                              // an exact power of two
  int scale = std::clamp(e, kMinScaleExponent, kMaxScaleExponent);
  // amax / format_max may have rounded down: make sure the block's largest value fits.
  while (scale < kMaxScaleExponent && amax * power_of_two(-scale) > format_max) ++scale;
  return scale;
}

size_t block_bytes(size_t count, int bits) {
  return 1 + (bits == 4 ? (count + 1) / 2 : count);
}

}  // namespace

bool outer_grad_bits_supported(int64_t bits) {
  return bits == 4 || bits == 8 || bits == 16 || bits == 32;
}

size_t outer_grad_encoded_bytes(size_t count, int bits) {
  if (bits == 32) return 4 * count;
  if (bits == 16) return 2 * count;
  const size_t full = count / kOuterGradBlock, rest = count % kOuterGradBlock;
  return full * block_bytes(kOuterGradBlock, bits) + (rest > 0 ? block_bytes(rest, bits) : 0);
}

namespace {

// The pool's chunks start on block (and so byte) boundaries.
static_assert(kElementwiseChunk % kOuterGradBlock == 0);

// Encodes values[0, n) into `o` (the encoding of the same values alone).
void encode_range(const float* values, size_t n, int bits, uint8_t* o) {
  if (bits == 32) {
    std::memcpy(o, values, 4 * n);
    return;
  }
  if (bits == 16) {
    for (size_t i = 0; i < n; ++i) {
      const uint16_t h = to_bf16_bits(values[i]);
      std::memcpy(o + 2 * i, &h, 2);
    }
    return;
  }
  const float format_max = bits == 4 ? kE2M1Max : kE4M3Max;
  for (size_t b = 0; b < n; b += kOuterGradBlock) {
    const size_t m = std::min(kOuterGradBlock, n - b);
    const float* x = values + b;
    float amax = 0;
    for (size_t i = 0; i < m; ++i) amax = std::max(amax, std::fabs(x[i]));
    const int e = scale_exponent(amax, format_max);
    *o++ = static_cast<uint8_t>(e + kScaleBias);
    const float inv_scale = power_of_two(-e);
    if (bits == 8) {
      for (size_t i = 0; i < m; ++i) *o++ = float_to_e4m3(x[i] * inv_scale);
    } else {
      for (size_t i = 0; i < m; i += 2) {
        const uint8_t lo = float_to_e2m1(x[i] * inv_scale);
        const uint8_t hi = i + 1 < m ? float_to_e2m1(x[i + 1] * inv_scale) : 0;
        *o++ = static_cast<uint8_t>(lo | (hi << 4));
      }
    }
  }
}

void decode_add_range(const uint8_t* p, int bits, float* acc, size_t n) {
  if (bits == 32) {
    for (size_t i = 0; i < n; ++i) {
      float v = 0;
      std::memcpy(&v, p + 4 * i, 4);
      acc[i] += v;
    }
    return;
  }
  if (bits == 16) {
    for (size_t i = 0; i < n; ++i) {
      uint16_t h = 0;
      std::memcpy(&h, p + 2 * i, 2);
      acc[i] += to_float(bf16{h});
    }
    return;
  }
  for (size_t b = 0; b < n; b += kOuterGradBlock) {
    const size_t m = std::min(kOuterGradBlock, n - b);
    float* a = acc + b;
    const float scale = power_of_two(static_cast<int>(*p++) - kScaleBias);
    if (bits == 8) {
      for (size_t i = 0; i < m; ++i) a[i] += e4m3_to_float(*p++) * scale;
    } else {
      for (size_t i = 0; i < m; i += 2) {
        const uint8_t byte = *p++;
        a[i] += e2m1_to_float(byte & 0xf) * scale;
        if (i + 1 < m) a[i + 1] += e2m1_to_float(byte >> 4) * scale;
      }
    }
  }
}

}  // namespace

void encode_outer_grad(std::span<const float> values, int bits, std::span<uint8_t> out,
                       const char* what) {
  if (out.size() != outer_grad_encoded_bytes(values.size(), bits)) {
    throw Error("internal: encode_outer_grad: output of the wrong size");
  }
  const size_t n = values.size();
  std::vector<size_t> first_bad(static_cast<size_t>(elementwise_chunks(static_cast<int64_t>(n))),
                                n);
  for_each_chunk(static_cast<int64_t>(n), [&](int64_t chunk, int64_t b, int64_t e) {
    const auto begin = static_cast<size_t>(b), count = static_cast<size_t>(e - b);
    for (size_t i = begin; i < begin + count; ++i) {
      // Beyond kLargest a value's rounding could overflow float32 when decoded: no sane
      // outer gradient comes near it, so it is treated like inf.
      if (!(std::fabs(values[i]) <= kLargest)) {
        first_bad[static_cast<size_t>(chunk)] = i;
        return;
      }
    }
    encode_range(values.data() + begin, count, bits,
                 out.data() + outer_grad_encoded_bytes(begin, bits));
  });
  for (size_t i : first_bad) {
    if (i < n) {
      throw InputError(std::string("the outer gradient of ") + what +
                       " is not finite (or beyond 1e36) at element " + std::to_string(i) +
                       ": the replica diverged; lower the learning rates or outer_lr");
    }
  }
}

void decode_add_outer_grad(std::span<const uint8_t> in, int bits, std::span<float> acc) {
  if (in.size() != outer_grad_encoded_bytes(acc.size(), bits)) {
    throw Error("internal: decode_add_outer_grad: input of the wrong size");
  }
  for_each_chunk(static_cast<int64_t>(acc.size()), [&](int64_t, int64_t b, int64_t e) {
    const auto begin = static_cast<size_t>(b), count = static_cast<size_t>(e - b);
    decode_add_range(in.data() + outer_grad_encoded_bytes(begin, bits), bits, acc.data() + begin,
                     count);
  });
}

}  // namespace nanogpt
