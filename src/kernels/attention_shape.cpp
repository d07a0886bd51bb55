#include "kernels/attention_shape.hpp"

#include <string>

#include "runtime/error.hpp"

namespace nanogpt {

Shape shape_of(const AttentionParams& p) {
  Shape s{};
  s.T = p.T;
  s.T_kv = p.T_kv == 0 ? p.T : p.T_kv;
  s.H = p.H;
  s.H_kv = p.H_kv == 0 ? p.H : p.H_kv;
  s.D = p.D;
  s.ld_q = p.ld_q == 0 ? p.ld : p.ld_q;
  s.ld_kv = p.ld_kv == 0 ? p.ld : p.ld_kv;
  s.offset = s.T_kv - s.T;
  s.per_group = s.H_kv > 0 ? s.H / s.H_kv : 1;
  return s;
}

void validate(const AttentionParams& p, const char* who) {
  const Shape s = shape_of(p);
  auto fail = [&](const std::string& why) {
    throw InputError(std::string(who) + ": " + why + " (T=" + std::to_string(p.T) +
                     ", T_kv=" + std::to_string(p.T_kv) + ", H=" + std::to_string(p.H) +
                     ", H_kv=" + std::to_string(p.H_kv) + ", D=" + std::to_string(p.D) +
                     ", ld=" + std::to_string(p.ld) + ", ld_q=" + std::to_string(p.ld_q) +
                     ", ld_kv=" + std::to_string(p.ld_kv) +
                     ", window_blocks=" + std::to_string(p.window_blocks) +
                     ", block_size=" + std::to_string(p.block_size) + ")");
  };
  if (p.T < 0 || p.H < 1 || p.D < 1) fail("need T >= 0, H >= 1 and D >= 1");
  if (p.T_kv < 0 || (p.T_kv > 0 && p.T_kv < p.T)) {
    fail(
        "T_kv must be 0 (meaning T) or at least T: the queries are the last T of the T_kv "
        "positions");
  }
  if (p.H_kv < 0 || s.H % s.H_kv != 0) {
    fail(
        "H_kv must be 0 (meaning H) or divide H: each key/value head serves H / H_kv query "
        "heads");
  }
  if (s.ld_q < s.H * s.D) fail("ld_q (or ld when ld_q is 0) must be at least H·D");
  if (s.ld_kv < s.H_kv * s.D) fail("ld_kv (or ld when ld_kv is 0) must be at least H_kv·D");
  if (p.window_blocks < 1 || p.block_size < 1) fail("window_blocks and block_size must be >= 1");
  if (s.T_kv > 0 && p.doc == nullptr) fail("doc is null");
  for (int64_t t = 1; t < s.T_kv; ++t) {
    if (p.doc[t] < p.doc[t - 1]) {
      fail("doc ids must be nondecreasing, but doc[" + std::to_string(t) +
           "] = " + std::to_string(p.doc[t]) + " < doc[" + std::to_string(t - 1) +
           "] = " + std::to_string(p.doc[t - 1]));
    }
  }
}

void validate_tensors(const AttentionParams& p, const char* who) {
  validate(p, who);
  const int full = (p.q != nullptr) + (p.k != nullptr) + (p.v != nullptr);
  const int rounded = (p.q_bf16 != nullptr) + (p.k_bf16 != nullptr) + (p.v_bf16 != nullptr);
  if (rounded != 0 && rounded != 3) {
    throw InputError(std::string(who) +
                     ": q_bf16, k_bf16 and v_bf16 are given all three or none (got " +
                     std::to_string(rounded) + ")");
  }
  if (p.T > 0 && full != 3 && rounded == 0) {
    throw InputError(std::string(who) + ": q, k and v must all be set (or q_bf16, k_bf16, v_bf16)");
  }
  if (rounded != 0 && p.precision != Precision::kBf16) {
    throw InputError(std::string(who) +
                     ": q, k and v stored in bf16 are for bf16 tile products; set precision to "
                     "bf16, or give q, k and v in fp32");
  }
}

void validate_backward(const AttentionParams& p, const char* who) {
  validate_tensors(p, who);
  if (p.T_kv != 0 && p.T_kv != p.T) {
    throw InputError(std::string(who) + ": the backward needs T_kv == T (or 0), got T=" +
                     std::to_string(p.T) + ", T_kv=" + std::to_string(p.T_kv) +
                     "; queries over a K/V cache (T_kv > T) are for decoding, forward only");
  }
}

void validate_forward_outputs(const AttentionParams& p, const float* out, const bf16* out_rounded,
                              const char* who) {
  if (p.T > 0 && out == nullptr && out_rounded == nullptr) {
    throw InputError(std::string(who) +
                     ": out is null (give out, or out_rounded for the bf16 "
                     "rows alone)");
  }
}

}  // namespace nanogpt
