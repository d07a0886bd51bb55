// The public entry points: the kernels on the active micro-kernel of the precision, and the
// share of tiles they visit.
#include "kernels/attention.hpp"

#include <vector>

#include "kernels/attention_internal.hpp"
#include "kernels/attention_mask.hpp"
#include "kernels/attention_shape.hpp"
#include "kernels/bf16.hpp"
#include "kernels/gemm/microkernel.hpp"
#include "runtime/integer_math.hpp"

namespace nanogpt {

namespace {

const MicroKernel& kernel_for(Precision precision) {
  return precision == Precision::kBf16 ? active_bf16_microkernel() : active_microkernel();
}

}  // namespace

void attention_forward(const AttentionParams& p, float* out, float* lse, bf16* out_rounded) {
  validate_forward_outputs(p, out, out_rounded, "attention_forward");
  // One query (decoding a token): packing the cache for a one-row tile product costs more than
  // the arithmetic (attention_decode.cpp).
  if (p.T == 1 && p.q != nullptr) {
    attention_forward_one_query(p, out, lse, out_rounded);
    return;
  }
  attention_forward_with(kernel_for(p.precision), p, out, lse, out_rounded);
}

void attention_backward(const AttentionParams& p, const float* out, const float* lse,
                        const float* dout, float* dq, float* dk, float* dv, const bf16* dout_bf16,
                        const bf16* out_bf16) {
  attention_backward_with(kernel_for(p.precision), p, out, lse, dout, dq, dk, dv, dout_bf16,
                          out_bf16);
}

bool attention_backward_keeps_score_gradients(const AttentionParams& p) {
  return score_gradient_bytes_per_key_tile(kernel_for(p.precision), p) <=
         stored_score_gradient_budget();
}

int64_t attention_visible_pairs(const AttentionParams& p) {
  validate(p, "attention_visible_pairs");
  const AttentionMask mask(p);
  int64_t pairs = 0;
  for (int64_t i = mask.offset(); i < mask.positions(); ++i) {
    pairs += i - mask.first_visible(i) + 1;
  }
  return pairs;
}

double attention_visited_fraction(const AttentionParams& p) {
  validate(p, "attention_visited_fraction");
  const Shape sh = shape_of(p);
  const AttentionMask mask(p);
  if (sh.T == 0) return 0.0;
  std::vector<int64_t> per_qt, per_kt;
  mask.visited_counts(per_qt, per_kt);
  int64_t visited = 0;
  for (int64_t n : per_qt) visited += n;
  return static_cast<double>(visited) /
         static_cast<double>(ceil_div(sh.T, kBq) * ceil_div(sh.T_kv, kBk));
}

}  // namespace nanogpt
