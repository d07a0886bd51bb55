// Scoring one model on the three case kinds (issue 17, item 5): a document's log-likelihood, the
// log-likelihood of continuations of a shared context, and sampled completions. Token ids in,
// numbers or ids out; the suite runner (suite_runner.hpp) does the text and the evaluators.
//
// Every sequence starts with <|endoftext|> (training documents do), so the first real token is
// predicted too and a text's tokens cover every byte of it.
//
// Choices: the context (EOT + context tokens) runs through the model into a K/V cache; its last
// final-norm row predicts every continuation's first token. Each continuation then runs from a
// copy of that cache, fed as its tokens but the last (a one-token continuation runs nothing);
// per continuation the context's last row and its own rows are gathered, and the head's per-row
// losses over all of them (one call) are the continuations' token log-likelihoods. So the
// context costs one forward however many choices it has, and each choice sees the context exactly
// as a full forward of context+choice would (tested against forward_loss of the concatenation).
//
// Batches: several choice cases (or generate cases) are scored together by one call, their
// sequences as segments of one batched cached forward (GptT::forward_cached_batch): all contexts
// in one forward, then all choices of all cases in one forward and one head call; in
// generation all prompts in one forward, then one forward per step over every sample of every
// case still running (a finished sample leaves the batch). The products then run on tens of
// rows instead of one to fifteen, where packing their weights cost as much as the product.
// A segment's rows are those it gets alone, so results do not depend on the batch.
//
// A scorer owns nothing but scratch: the model's activations are overwritten by every call, so
// one scorer (and its model) serves one thread at a time.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "model/gpt.hpp"
#include "model/kv_cache.hpp"
#include "model/sampling.hpp"
#include "runtime/aligned_memory.hpp"
#include "runtime/random.hpp"

namespace nanogpt {

struct GeneratedSample {
  std::vector<uint32_t> tokens;  // the completion's tokens (no EOT, no prompt)
  bool hit_eot = false;          // the model ended the document
};

// One choice case: a context and its continuations (neither empty).
struct ChoiceRequest {
  std::span<const uint32_t> context;
  std::span<const std::vector<uint32_t>> continuations;
};

// One generate case: rngs->size() samples of the prompt, each at most max_tokens long and
// ending early at EOT or when stop_here says the tokens so far end the completion; (*rngs)[i]
// draws sample i's tokens.
struct GenerateRequest {
  std::span<const uint32_t> prompt;
  int64_t max_tokens = 0;
  SamplingSettings settings;
  std::vector<Rng>* rngs = nullptr;
  std::function<bool(const std::vector<uint32_t>&)> stop_here;
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
  // The same for several cases in one batch: per request, per continuation.
  std::vector<std::vector<double>> continuation_logprobs(std::span<const ChoiceRequest> requests);

  // Bytes the K/V caches' arena holds: the largest call's caches so far.
  size_t cache_bytes() const { return arena_.capacity(); }

  // Per request, its samples (see GenerateRequest), all requests decoded together.
  std::vector<std::vector<GeneratedSample>> generate(std::span<const GenerateRequest> requests);

  // One generate request: `samples` completions of the prompt (see GenerateRequest).
  template <class StopFn>
  std::vector<GeneratedSample> generate(std::span<const uint32_t> prompt, int64_t max_tokens,
                                        const SamplingSettings& settings, std::vector<Rng>& rngs,
                                        const StopFn& stop_here) {
    GenerateRequest r{prompt, max_tokens, settings, &rngs, stop_here};
    return std::move(generate(std::span<const GenerateRequest>(&r, 1))[0]);
  }

 private:
  // The K/V caches of a call, slot i for its i-th sequence, each of the positions that
  // sequence needs: views carved end to end out of arena_, which is kept between calls and
  // grows to the largest call's. A cache allocated per case (or per choice) cost a page fault
  // per 4 KiB on every call (glibc maps blocks this large afresh and unmaps them when freed,
  // measured ~40% of fortunes-choice's time), and caches kept per slot each grew to the most
  // that slot ever needed, which the arena, sized by a call's sum, does not.
  void make_caches(std::span<const int64_t> positions);
  // Every slot after a request's first (first_slot: each request's, in order) gets a copy of
  // that first slot's cache: the prefix its request's sequences share. On the pool: the copies
  // are most of their cost in first touches of the arena's pages.
  void copy_prefixes(std::span<const size_t> first_slot);
  std::vector<KvCache> caches_;
  AlignedBuffer arena_;

  // The head's log-likelihoods of `targets`, one per final-norm row of `rows` ([T, d]).
  std::vector<float> head_logprobs(const float* rows, std::span<const int32_t> targets);
  std::vector<float> logits_;
  std::vector<SamplingScratch> sampling_;  // per worker of the pool

  Gpt& model_;
  int64_t window_blocks_;
};

}  // namespace nanogpt
