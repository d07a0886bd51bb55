// The log-likelihood metrics of lm-evaluation-harness as pure functions of per-choice or
// per-document log-likelihoods (natural log), so they are tested apart from any model.
//
// Multiple choice (each choice's log-likelihood is the sum over its continuation tokens given
// the context; the choice strings are the continuations as scored, usually with their leading
// space):
// - acc: the choice with the largest summed log-likelihood;
// - acc_norm: the largest log-likelihood per character of the choice (the harness divides by
//   len() of the Python string: Unicode code points);
// - acc_bytes: per UTF-8 byte of the choice.
// Ties go to the first choice (numpy's argmax).
//
// Text (a document's summed log-likelihood over its T tokens and B UTF-8 bytes):
// loss = -sum / T nats per token, perplexity = exp(loss), bits per byte = -sum / (B ln 2).
// Bits per byte does not depend on the tokenizer, so two tokenizers compare on it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace nanogpt {

// Index of the largest value, the first of equal ones. Needs a non-empty span.
size_t argmax_first(std::span<const double> values);

// Unicode code points in valid UTF-8 text (bytes that do not continue a character).
int64_t utf8_characters(std::string_view text);

size_t choice_acc(std::span<const double> logprobs);
// `choices` gives each choice's text (non-empty); sizes must match.
size_t choice_acc_norm(std::span<const double> logprobs, const std::vector<std::string>& choices);
size_t choice_acc_bytes(std::span<const double> logprobs, const std::vector<std::string>& choices);

double text_loss(double logprob_sum, int64_t tokens);
double text_perplexity(double logprob_sum, int64_t tokens);
double text_bits_per_byte(double logprob_sum, int64_t bytes);

}  // namespace nanogpt
