#include "posttrain/loss_aggregation.hpp"

#include <string>
#include <utility>

#include "runtime/error.hpp"

namespace nanogpt {
namespace {

constexpr std::pair<LossAggregation, const char*> kModes[] = {
    {LossAggregation::kSequenceMean, "sequence_mean"},
    {LossAggregation::kTokenMean, "token_mean"},
    {LossAggregation::kConstant, "constant"}};

int64_t counted_tokens(const SequenceLayout& layout, int64_t s) {
  int64_t n = 0;
  for (int64_t t = layout.offsets[s]; t < layout.offsets[s + 1]; ++t) n += layout.mask[t] != 0;
  return n;
}

}  // namespace

const char* loss_aggregation_name(LossAggregation mode) {
  for (auto [m, name] : kModes) {
    if (m == mode) return name;
  }
  throw Error("internal: a loss aggregation without a name");
}

LossAggregation parse_loss_aggregation(std::string_view name) {
  for (auto [m, n] : kModes) {
    if (name == n) return m;
  }
  throw InputError("unknown loss aggregation '" + std::string(name) +
                   "'; valid aggregations: \"sequence_mean\" (GRPO), \"token_mean\" (DAPO) or "
                   "\"constant\" (Dr. GRPO)");
}

void check_layout(const SequenceLayout& layout, std::string_view loss) {
  const std::string where(loss);
  if (layout.offsets.empty() || layout.offsets[0] != 0) {
    throw InputError(where +
                     ": the sequence offsets must start with 0 and have one entry more than "
                     "there are sequences (the last one the number of tokens)");
  }
  for (size_t s = 1; s < layout.offsets.size(); ++s) {
    if (layout.offsets[s] < layout.offsets[s - 1]) {
      throw InputError(where + ": sequence offsets[" + std::to_string(s) +
                       "] = " + std::to_string(layout.offsets[s]) + " is below offsets[" +
                       std::to_string(s - 1) + "] = " + std::to_string(layout.offsets[s - 1]) +
                       "; offsets must not decrease");
    }
  }
  if (layout.offsets.back() != layout.tokens()) {
    throw InputError(where + ": the last sequence offset is " +
                     std::to_string(layout.offsets.back()) + " but the mask has " +
                     std::to_string(layout.tokens()) +
                     " tokens; the last offset is the number of tokens");
  }
}

LossNormalizers count_normalizers(const SequenceLayout& layout) {
  check_layout(layout, "count_normalizers");
  LossNormalizers n;
  n.sequences = layout.sequences();
  for (uint8_t m : layout.mask) n.tokens += m != 0;
  return n;
}

std::vector<double> sequence_weights(const AggregationConfig& config, const SequenceLayout& layout,
                                     const LossNormalizers& whole, std::string_view loss) {
  check_layout(layout, loss);
  const std::string where(loss);
  const LossNormalizers part = count_normalizers(layout);
  if (whole.sequences < part.sequences || whole.tokens < part.tokens) {
    throw InputError(
        where + ": the batch's normalizers (" + std::to_string(whole.sequences) + " sequences, " +
        std::to_string(whole.tokens) + " counted tokens) are smaller than this part's (" +
        std::to_string(part.sequences) + " sequences, " + std::to_string(part.tokens) +
        " counted tokens); pass the whole batch's counts (count_normalizers of the whole batch, or "
        "the sum of its parts')");
  }
  const int64_t num_sequences = layout.sequences();
  std::vector<double> weights(static_cast<size_t>(num_sequences), 0.0);
  if (config.mode == LossAggregation::kConstant) {
    if (config.max_length < 1) {
      throw InputError(where + ": max_length = " + std::to_string(config.max_length) +
                       " is out of range; the constant aggregation (Dr. GRPO) needs it >= 1: set "
                       "it to the generation budget (the most tokens a completion may have)");
    }
    for (int64_t s = 0; s < num_sequences; ++s) {
      const int64_t n = counted_tokens(layout, s);
      if (n > config.max_length) {
        throw InputError(
            where + ": sequence " + std::to_string(s) + " has " + std::to_string(n) +
            " counted tokens, more than max_length = " + std::to_string(config.max_length) +
            "; max_length must be at least every completion's length");
      }
    }
  }
  for (int64_t s = 0; s < num_sequences; ++s) {
    double w = 0;
    switch (config.mode) {
      case LossAggregation::kSequenceMean: {
        const int64_t n = counted_tokens(layout, s);
        if (n > 0) w = 1.0 / (static_cast<double>(whole.sequences) * static_cast<double>(n));
        break;
      }
      case LossAggregation::kTokenMean:
        if (whole.tokens > 0) w = 1.0 / static_cast<double>(whole.tokens);
        break;
      case LossAggregation::kConstant:
        w = 1.0 / (static_cast<double>(whole.sequences) * static_cast<double>(config.max_length));
        break;
    }
    weights[static_cast<size_t>(s)] = w;
  }
  return weights;
}

}  // namespace nanogpt
