#include "eval/evaluator_metrics.hpp"

#include <cmath>

#include "runtime/error.hpp"

namespace nanogpt {

namespace {

std::vector<double> per_unit(std::span<const double> logprobs,
                             const std::vector<std::string>& choices, bool bytes) {
  if (logprobs.size() != choices.size()) {
    throw Error("choice metrics: " + std::to_string(logprobs.size()) + " log-likelihoods for " +
                std::to_string(choices.size()) + " choices");
  }
  std::vector<double> out(logprobs.size());
  for (size_t i = 0; i < out.size(); ++i) {
    const int64_t units =
        bytes ? static_cast<int64_t>(choices[i].size()) : utf8_characters(choices[i]);
    if (units == 0) throw Error("choice metrics: choice " + std::to_string(i) + " is empty");
    out[i] = logprobs[i] / static_cast<double>(units);
  }
  return out;
}

}  // namespace

size_t argmax_first(std::span<const double> values) {
  if (values.empty()) throw Error("argmax of no values");
  size_t best = 0;
  for (size_t i = 1; i < values.size(); ++i) {
    if (values[i] > values[best]) best = i;
  }
  return best;
}

int64_t utf8_characters(std::string_view text) {
  int64_t n = 0;
  for (unsigned char c : text) n += (c & 0xC0) != 0x80;
  return n;
}

size_t choice_acc(std::span<const double> logprobs) {
  return argmax_first(logprobs);
}

size_t choice_acc_norm(std::span<const double> logprobs, const std::vector<std::string>& choices) {
  return argmax_first(per_unit(logprobs, choices, false));
}

size_t choice_acc_bytes(std::span<const double> logprobs, const std::vector<std::string>& choices) {
  return argmax_first(per_unit(logprobs, choices, true));
}

double text_loss(double logprob_sum, int64_t tokens) {
  if (tokens < 1) throw Error("text loss over no tokens");
  return -logprob_sum / static_cast<double>(tokens);
}

double text_perplexity(double logprob_sum, int64_t tokens) {
  return std::exp(text_loss(logprob_sum, tokens));
}

double text_bits_per_byte(double logprob_sum, int64_t bytes) {
  if (bytes < 1) throw Error("bits per byte over no bytes");
  return -logprob_sum / (static_cast<double>(bytes) * std::log(2.0));
}

}  // namespace nanogpt
