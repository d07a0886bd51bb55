#include "model/decoder.hpp"

#include <cmath>

#include "kernels/fused_linear_cross_entropy.hpp"

namespace nanogpt {

GptDecoder::GptDecoder(Gpt& model, int64_t max_tokens, int64_t window_blocks)
    : model_(model),
      window_blocks_(window_blocks),
      cache_(model.config(), max_tokens),
      logits_(static_cast<size_t>(model.config().vocab_padded())) {}

const std::vector<float>& GptDecoder::feed(std::span<const int32_t> tokens) {
  model_.forward_cached(tokens, window_blocks_, cache_);
  // The head on the last token's row only.
  const Config& c = model_.config();
  const int64_t d = c.model_dim;
  FusedLossParams p;
  p.T = 1;
  p.d = d;
  p.V = c.vocab_padded();
  p.x = model_.final_norm().data() + (static_cast<int64_t>(tokens.size()) - 1) * d;
  p.W = model_.weights().lm_head;
  p.W_packed = model_.packed_head();
  p.softcap = static_cast<float>(c.logit_softcap);
  p.softcap_divisor = static_cast<float>(7.5 * std::sqrt(static_cast<double>(d)));
  p.fp8 = c.fp8_head;
  p.precision = model_.precision();
  const Workspace::Use scratch(model_.workspace());  // the head's scratch is the model's too
  capped_logits(p, logits_.data());
  return logits_;
}

}  // namespace nanogpt
