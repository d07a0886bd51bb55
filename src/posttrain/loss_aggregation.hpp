// How the per-token losses of a batch of sequences become one number L (issue 18, item 6): the
// one place the policy loss and the value loss take their token weights from.
//
// A batch is S sequences with their tokens laid end to end (SequenceLayout): sequence s owns
// tokens [offsets[s], offsets[s+1]), and the mask says which of them count (a completion's
// tokens; not the prompt's, not padding). With ℓ_t a counted token's loss and n_s the counted
// tokens of sequence s, every mode is L = Σ_s w_s · Σ_{t∈s, counted} ℓ_t with
//   sequence_mean (GRPO as published):  w_s = 1 / (S · n_s)   mean per sequence, then over them
//   token_mean    (DAPO):               w_s = 1 / T           T = Σ_s n_s, every token alike
//   constant      (Dr. GRPO):           w_s = 1 / (S · L_max)  L_max a fixed budget (max tokens)
// sequence_mean gives a long completion's tokens less weight each, so long wrong answers are
// penalised less per token than short ones (the length bias DAPO and Dr. GRPO remove);
// token_mean weighs tokens alike but its divisor still varies with the batch; constant divides by
// a number no sample changes, so the loss is an unbiased sum. A sequence with no counted token
// contributes nothing but still counts in S (TRL clamps its n_s to 1 the same way).
//
// Micro-batches: S and T are the whole batch's (LossNormalizers), never recounted per part, so
// the parts' L and gradients add up exactly to the whole batch's (n_s is a sequence's own, and a
// sequence is never split).
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

namespace nanogpt {

enum class LossAggregation { kSequenceMean, kTokenMean, kConstant };

// "sequence_mean", "token_mean", "constant".
const char* loss_aggregation_name(LossAggregation mode);
// The inverse of loss_aggregation_name; any other name is an InputError listing the valid ones.
LossAggregation parse_loss_aggregation(std::string_view name);

// Sequences laid end to end: offsets has S + 1 entries, offsets[0] = 0, non-decreasing,
// offsets[S] = mask.size(); mask[t] != 0 where token t counts.
struct SequenceLayout {
  std::span<const int64_t> offsets;
  std::span<const uint8_t> mask;

  int64_t sequences() const {
    return offsets.empty() ? 0 : static_cast<int64_t>(offsets.size()) - 1;
  }
  int64_t tokens() const { return static_cast<int64_t>(mask.size()); }
};

// An InputError naming `loss` when offsets or mask break SequenceLayout's rules.
void check_layout(const SequenceLayout& layout, std::string_view loss);

// The whole batch's counts, the divisors of L. The normalizers of a batch made of parts are the
// sum of the parts' (operator+=).
struct LossNormalizers {
  int64_t sequences = 0;  // S
  int64_t tokens = 0;     // T, counted tokens only

  LossNormalizers& operator+=(const LossNormalizers& other) {
    sequences += other.sequences;
    tokens += other.tokens;
    return *this;
  }
};

// S and T of `layout` (checked).
LossNormalizers count_normalizers(const SequenceLayout& layout);

struct AggregationConfig {
  LossAggregation mode = LossAggregation::kSequenceMean;
  // L_max of `constant`: the generation budget (e.g. max new tokens), at least every sequence's
  // counted tokens. Only `constant` reads it.
  int64_t max_length = 0;
};

// w_s for every sequence of `layout`, a part of the batch `whole` counts. InputErrors (naming
// `loss`): `whole` smaller than the part, max_length < 1 or below a sequence's counted tokens
// under `constant`. When T (or S) is 0 nothing is counted and every weight is 0.
std::vector<double> sequence_weights(const AggregationConfig& config, const SequenceLayout& layout,
                                     const LossNormalizers& whole, std::string_view loss);

}  // namespace nanogpt
