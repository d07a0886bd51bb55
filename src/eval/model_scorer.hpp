// Scoring one model on the three case kinds (issue 17, item 5): a document's log-likelihood, the
// log-likelihood of continuations of a shared context, and sampled completions. Token ids in,
// numbers or ids out; the suite runner (suite_runner.hpp) does the text and the evaluators.
//
// Every sequence starts with <|endoftext|> (training documents do), so the first real token is
// predicted too and a text's tokens cover every byte of it.
//
// Choices: the context (EOT + context tokens but its last) runs once through the model into a
// K/V cache; each continuation then runs from a copy of that cache, fed as [last context token,
// continuation tokens but the last]; the final-norm rows of all choices are gathered and the
// head's per-row losses over them (one call) are the continuations' token log-likelihoods. So the
// context costs one forward however many choices it has, and each choice sees the context exactly
// as a full forward of context+choice would (tested against forward_loss of the concatenation).
//
// A scorer owns nothing but scratch: the model's activations are overwritten by every call, so
// one scorer (and its model) serves one thread at a time.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "model/gpt.hpp"
#include "model/sampling.hpp"
#include "runtime/random.hpp"

namespace nanogpt {

struct GeneratedSample {
  std::vector<uint32_t> tokens;  // the completion's tokens (no EOT, no prompt)
  bool hit_eot = false;          // the model ended the document
};

class ModelScorer {
 public:
  // window_blocks: the long-layer attention window (what training ended with).
  ModelScorer(Gpt& model, int64_t window_blocks);

  const Config& config() const { return model_.config(); }

  // Σ log p(token_t | EOT, tokens_<t) over all tokens (natural log). Needs >= 1 token.
  double text_logprob(std::span<const uint32_t> tokens);

  // For each continuation: Σ log p(cont_j | EOT, context, cont_<j). Needs a non-empty context
  // and non-empty continuations.
  std::vector<double> continuation_logprobs(
      std::span<const uint32_t> context, const std::vector<std::vector<uint32_t>>& continuations);

  // `samples` completions of the prompt (run once into the cache, then copied per sample),
  // each at most max_tokens long and ending early at EOT or when `stop_here` says the tokens so
  // far end the completion. rngs[i] draws sample i's tokens.
  template <class StopFn>
  std::vector<GeneratedSample> generate(std::span<const uint32_t> prompt, int64_t max_tokens,
                                        const SamplingSettings& settings, std::vector<Rng>& rngs,
                                        const StopFn& stop_here);

 private:
  // The caches are kept between calls and refilled by copy-assignment into their own storage:
  // a cache allocated per case (or per choice) costs a page fault per 4 KiB on every call
  // (glibc maps blocks this large afresh and unmaps them when freed), which measured ~40% of
  // fortunes-choice's time. Capacities only grow (in steps of 256 positions).
  void reserve(int64_t positions);
  // base_ emptied (a copy of empty_), with room for `positions`.
  KvCache& fresh_base(int64_t positions);
  // branch_ as a copy of base_.
  KvCache& branch();
  std::unique_ptr<KvCache> empty_, base_, branch_;
  int64_t capacity_ = 0;

  // The head's log-likelihoods of `targets`, one per final-norm row of `rows` ([T, d]).
  std::vector<float> head_logprobs(const float* rows, std::span<const int32_t> targets);
  AlignedVector<float> rows_;  // gathered final-norm rows of a case's choices
  // The logits of the last of the last forward's `rows` rows (valid until the next call).
  const std::vector<float>& last_logits(int64_t rows) {
    forward_row_logits(model_, rows - 1, logits_);
    return logits_;
  }
  std::vector<float> logits_;
  std::vector<int32_t> order_;
  std::vector<double> probs_;

  Gpt& model_;
  int64_t window_blocks_;
};

template <class StopFn>
std::vector<GeneratedSample> ModelScorer::generate(std::span<const uint32_t> prompt,
                                                   int64_t max_tokens,
                                                   const SamplingSettings& settings,
                                                   std::vector<Rng>& rngs,
                                                   const StopFn& stop_here) {
  const Config& c = model_.config();
  std::vector<int32_t> ids;
  ids.reserve(prompt.size() + 1);
  ids.push_back(static_cast<int32_t>(c.eot_id));
  for (uint32_t t : prompt) ids.push_back(static_cast<int32_t>(t));
  KvCache& prompt_cache = fresh_base(static_cast<int64_t>(ids.size()) + max_tokens);
  model_.forward_cached(ids, window_blocks_, prompt_cache);
  const std::vector<float> prompt_logits = last_logits(static_cast<int64_t>(ids.size()));
  std::vector<GeneratedSample> out(rngs.size());
  for (size_t s = 0; s < rngs.size(); ++s) {
    KvCache& cache = branch();  // the prompt's keys and values, run once
    const std::vector<float>* logits = &prompt_logits;
    GeneratedSample& g = out[s];
    for (int64_t n = 0; n < max_tokens; ++n) {
      const int32_t next = sample_token(*logits, c.vocab_size, settings, rngs[s], order_, probs_);
      if (next == c.eot_id) {
        g.hit_eot = true;
        break;
      }
      g.tokens.push_back(static_cast<uint32_t>(next));
      if (stop_here(g.tokens) || n + 1 == max_tokens) break;
      model_.forward_cached(std::span<const int32_t>(&next, 1), window_blocks_, cache);
      logits = &last_logits(1);
    }
  }
  return out;
}

}  // namespace nanogpt
