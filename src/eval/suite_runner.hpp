// Running a suite on a model (issue 17, item 5): each case tokenized, scored by ModelScorer
// (model_scorer.hpp), judged by its evaluators, recorded in an EvalReport with summaries.
//
// Batches: consecutive choice cases (up to 8) or generate cases (up to 64, 256 samples in all)
// are scored by one scorer call, their sequences side by side in the model's batched cached
// forward (model_scorer.hpp); a batch also stops at 256 MiB of K/V caches. The batches depend on
// the suite alone, and a case's duration is its share of its batch's time.
//
// Parallelism: batches are handed out over one worker per model given, each worker's kernels on
// a single-thread pool of its own, so cases run side by side and nothing is shared but the
// (read-only) suite and tokenizer. With one model, batches run one after another with the
// model's products on the calling thread's pool. Which is faster depends on the model and the
// cases; `nanogpt evals run --threads` measures it (docs/ARCHITECTURE.md, "Evaluations").
//
// Randomness: sample s of case i (over all repeats) draws from Rng(mix(seed, i, s)), so the
// report's outputs do not depend on the number of workers, the batches or the order cases
// finish in.
// Completions: decoded, cut at the first stop string (not kept), and made valid UTF-8 (bytes of
// a character the token limit cut in two become U+FFFD), so a report is always valid JSON.
// Repeats: a generate case sampled at a temperature above 0 gets samples × repeats completions
// (pass@k, mean@n over all); text, choice and greedy cases are deterministic and run once.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "data/bpe_tokenizer.hpp"
#include "eval/eval_report.hpp"
#include "eval/suite.hpp"
#include "model/gpt.hpp"

namespace nanogpt {

struct SuiteRunOptions {
  uint64_t seed = 0;
  int64_t repeats = 1;
  int64_t window_blocks = 1;  // the long-layer attention window
  // A generate case without max_tokens stops at its stop strings or after this many tokens.
  int64_t unbounded_max_tokens = 1024;
  // The first warmup_cases cases (at most all) are scored once on every model before the run,
  // untimed, and their results dropped: the report's durations then leave out what only a
  // first batch pays (packing the weights, the first touch of activations and caches), as a
  // benchmark's warm-up leaves it out of its timing. Outputs do not change (randomness is per
  // case and sample, above).
  int64_t warmup_cases = 0;
  // Called (under a lock, from any worker) after each case: cases done, cases in all.
  std::function<void(size_t, size_t)> progress;
};

// Refuses a tokenizer that cannot feed the model (more tokens than the vocabulary, another
// end-of-text id) and a suite written for another tokenizer than `tokenizer` (the suite's
// "tokenizer" field: a tokenizer file, compared by sha256, a sha256 in hex, or the spec the
// checkpoint records). `spec` names the tokenizer in errors.
void check_tokenizer_fits(const Suite& suite, const BpeTokenizer& tokenizer,
                          const std::string& spec, const Config& config);

// Runs every case. models: one per worker (at least one, all the same weights). The report's
// checkpoint and tokenizer fields are left for the caller; threads is models.size().
EvalReport run_suite(const Suite& suite, const BpeTokenizer& tokenizer,
                     const std::vector<Gpt*>& models, const SuiteRunOptions& options);

}  // namespace nanogpt
