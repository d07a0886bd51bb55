// How Streaming DiLoCo's outer gradients travel: `bits` per value, 4 | 8 | 16 | 32.
//   4: FP4 E2M1 (kernels/fp4.hpp) in blocks of kOuterGradBlock = 32 values, each block with a
//      power-of-two scale 2^e stored as one byte (e + 127, as OCP MX's E8M0) and its 32 codes
//      two to a byte (low nibble first): 17 bytes per 32 values, 4.25 bits each.
//   8: FP8 E4M3 in the same blocks: 33 bytes per 32 values.
//  16: bfloat16, round to nearest even, no scale.
//  32: float32 as is.
// The scale is the smallest power of two that puts the block's largest magnitude at or below
// the format's largest value (6 for E2M1, 448 for E4M3), so nothing saturates, and scaling is
// exact both ways (a multiply by a power of two). A block of zeros has the smallest scale.
// The values are decoded into float32 and summed there (decode_add): the receiver adds every
// sender's exactly decoded values, so precision is lost once, at the sender's encode, never at
// a hop of a reduction. Both run on the thread pool in chunks fixed by the element count
// (optim/elementwise.hpp), so the bytes and sums do not depend on the number of threads.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

namespace nanogpt {

inline constexpr size_t kOuterGradBlock = 32;

// Whether `bits` is one of 4, 8, 16, 32.
bool outer_grad_bits_supported(int64_t bits);
// Bytes that `count` values take at `bits`.
size_t outer_grad_encoded_bytes(size_t count, int bits);
// Encodes `values` (finite, |x| <= 1e36: an InputError naming `what` and the element
// otherwise) into `out`
// (outer_grad_encoded_bytes(values.size(), bits) bytes).
void encode_outer_grad(std::span<const float> values, int bits, std::span<uint8_t> out,
                       const char* what);
// acc[i] += the value encoded at i, for acc.size() values encoded in `in`.
void decode_add_outer_grad(std::span<const uint8_t> in, int bits, std::span<float> acc);

}  // namespace nanogpt
