// The attention parameters with their defaults resolved (T_kv, H_kv, ld_q, ld_kv), and their
// validation: bad input is an InputError naming the parameter and how to fix it.
#pragma once

#include <cstdint>

#include "kernels/attention.hpp"

namespace nanogpt {

// The parameters with their defaults resolved.
struct Shape {
  int64_t T, T_kv, H, H_kv, D, ld_q, ld_kv;
  int64_t offset;     // position of query 0: T_kv − T
  int64_t per_group;  // query heads per key/value head, H / H_kv
  int64_t kv_head(int64_t h) const { return h / per_group; }
};

Shape shape_of(const AttentionParams& p);

// The shape and the mask (doc) are valid; `who` names the caller in the message.
void validate(const AttentionParams& p, const char* who);
// And q, k, v are set.
void validate_tensors(const AttentionParams& p, const char* who);
// And T_kv == T: the backward differentiates a training step, where every position is a query.
void validate_backward(const AttentionParams& p, const char* who);
// The forward's outputs: out, out_rounded or both (InputError where T > 0 and neither is given).
void validate_forward_outputs(const AttentionParams& p, const float* out, const bf16* out_rounded,
                              const char* who);

}  // namespace nanogpt
