// Scoring a model on suites (eval/model_scorer, eval/suite_runner) and the reports
// (eval/eval_report): every score against an independent computation on the same model.
// - text: the summed log-likelihood equals -forward_loss of the same tokens (the training
//   forward, one call), within 1e-5 relative in fp32;
// - choice: each continuation's log-likelihood (context once in a K/V cache, each choice from a
//   copy) equals the sum of forward_loss's per-token losses over the continuation's positions
//   of a full forward of EOT + context + continuation, within 1e-4 absolute in fp32 (sums of
//   up to ~20 token losses, each within ~1e-6 of the other path's);
// - generate: greedy completions equal an argmax loop over GptDecoder (the `nanogpt sample`
//   path) token for token; sampled ones do not depend on the number of workers;
// - batches: choice cases scored together equal each case alone (1e-6 relative; 0 on this
//   machine, printed), sampled completions of several cases and samples decoded together equal,
//   token for token, a loop over GptDecoder per sample with the same generator (today's path);
// - pass@k over repeats against brute-force enumeration of k-subsets;
// - reports: JSON read and written again is byte-identical; errors name the file and field.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <numeric>
#include <set>

#include "data/bpe_tokenizer.hpp"
#include "data/utf8.hpp"
#include "eval/eval_report.hpp"
#include "eval/model_scorer.hpp"
#include "eval/suite_runner.hpp"
#include "model/decoder.hpp"
#include "model/kv_cache.hpp"
#include "runtime/error.hpp"
#include "runtime/profiler.hpp"
#include "support/micro_tokenizer.hpp"
#include "support/model.hpp"

namespace nanogpt {
namespace {

Config fp32_micro() {
  Config c = micro_config();
  c.precision = PrecisionSetting::kFp32;
  return c;
}

std::unique_ptr<Gpt> micro_model() {
  auto m = std::make_unique<Gpt>(fp32_micro());
  randomize(*m, 21);
  return m;
}

constexpr int64_t kWindow = 1;

std::vector<uint32_t> ids(const BpeTokenizer& tok, const std::string& s) {
  return tok.encode(s, false);
}

TEST(EvalScorer, TextLogprobEqualsTheTrainingForward) {
  const BpeTokenizer tok = micro_tokenizer();
  auto model = micro_model();
  ModelScorer scorer(*model, kWindow);
  // 150+ tokens: past one 128-token mask block, so the window is in play.
  std::string text;
  for (int i = 0; i < 40; ++i) text += "the cat sat on mat " + std::to_string(i) + ". ";
  const auto t = ids(tok, text);
  ASSERT_GT(t.size(), 150u);
  const double ours = scorer.text_logprob(t);
  std::vector<int32_t> in = {299}, tg;
  for (size_t i = 0; i < t.size(); ++i) {
    tg.push_back(static_cast<int32_t>(t[i]));
    if (i + 1 < t.size()) in.push_back(static_cast<int32_t>(t[i]));
  }
  const double full = model->forward_loss(in, tg, kWindow);
  std::printf("text: ours %.9g, forward_loss %.9g\n", ours, -full);
  EXPECT_NEAR(ours, -full, 1e-5 * std::abs(full));
  EXPECT_LT(ours, 0);
}

TEST(EvalScorer, ChoiceLogprobsEqualFullForwardsOfContextPlusChoice) {
  const BpeTokenizer tok = micro_tokenizer();
  auto model = micro_model();
  ModelScorer scorer(*model, kWindow);
  std::string context;
  for (int i = 0; i < 12; ++i) context += "a fortune says hello " + std::to_string(i) + ";";
  const std::vector<std::string> choices = {" yes", " no way at all", " perhaps, said the cat",
                                            " q"};
  std::vector<std::vector<uint32_t>> conts;
  for (const auto& c : choices) conts.push_back(ids(tok, c));
  const auto ctx = ids(tok, context);
  ASSERT_GT(ctx.size(), 128u);  // the window mask matters
  const std::vector<double> ours = scorer.continuation_logprobs(ctx, conts);
  ASSERT_EQ(ours.size(), choices.size());
  double worst = 0;
  for (size_t k = 0; k < conts.size(); ++k) {
    std::vector<int32_t> seq = {299};
    for (uint32_t t : ctx) seq.push_back(static_cast<int32_t>(t));
    for (uint32_t t : conts[k]) seq.push_back(static_cast<int32_t>(t));
    std::vector<int32_t> in(seq.begin(), seq.end() - 1), tg(seq.begin() + 1, seq.end());
    std::vector<float> per(in.size());
    model->forward_loss(in, tg, kWindow, per.data());
    double ref = 0;
    for (size_t j = in.size() - conts[k].size(); j < in.size(); ++j) ref -= per[j];
    worst = std::max(worst, std::abs(ours[k] - ref));
    EXPECT_NEAR(ours[k], ref, 1e-4) << choices[k];
  }
  std::printf("choice: worst difference from full forwards %.2e\n", worst);
  // The scores are not all alike: the check would pass vacuously otherwise.
  EXPECT_NE(ours[0], ours[1]);
}

TEST(EvalScorer, BatchedChoiceCasesEqualEachCaseAlone) {
  const BpeTokenizer tok = micro_tokenizer();
  auto model = micro_model();
  ModelScorer scorer(*model, kWindow);
  std::vector<std::vector<uint32_t>> contexts;
  std::vector<std::vector<std::vector<uint32_t>>> conts;
  for (int k = 0; k < 5; ++k) {
    std::string context;
    for (int i = 0; i < 3 + 9 * k; ++i) context += "case " + std::to_string(k * i) + " says ";
    contexts.push_back(ids(tok, context));
    conts.push_back({ids(tok, " yes"), ids(tok, " no way " + std::to_string(k))});
    if (k % 2 == 0) conts.back().push_back(ids(tok, " perhaps, said the cat"));
  }
  ASSERT_GT(contexts.back().size(), 128u);  // the window mask matters
  std::vector<ChoiceRequest> requests;
  for (size_t k = 0; k < contexts.size(); ++k) requests.push_back({contexts[k], conts[k]});
  const std::vector<std::vector<double>> together = scorer.continuation_logprobs(requests);
  ASSERT_EQ(together.size(), contexts.size());
  double worst = 0;
  for (size_t k = 0; k < contexts.size(); ++k) {
    const std::vector<double> alone = scorer.continuation_logprobs(contexts[k], conts[k]);
    ASSERT_EQ(together[k].size(), alone.size());
    for (size_t j = 0; j < alone.size(); ++j) {
      worst = std::max(worst, std::abs(together[k][j] - alone[j]) / std::abs(alone[j]));
      EXPECT_NEAR(together[k][j], alone[j], 1e-6 * std::abs(alone[j]));
    }
  }
  std::printf("choice batch: worst relative difference from each case alone %.2e\n", worst);
}

// A call's caches are carved out of one arena: each choice's cache holds its prefix (EOT and
// the context) and its continuation but its last token, no more; a smaller call reuses the
// arena without growing it.
TEST(EvalScorer, ChoiceCachesTakeWhatEachChoiceNeedsFromOneArena) {
  const BpeTokenizer tok = micro_tokenizer();
  auto model = micro_model();
  ModelScorer scorer(*model, kWindow);
  EXPECT_EQ(scorer.cache_bytes(), 0u);
  const std::vector<uint32_t> a = ids(tok, "the cat sat on the mat and"),
                              b = ids(tok, "a much longer context, one that goes on and on, says");
  const std::vector<std::vector<uint32_t>> ca = {ids(tok, " purred"), ids(tok, " left at once")},
                                           cb = {ids(tok, " yes"), ids(tok, " no"),
                                                 ids(tok, " something else entirely")};
  const std::vector<ChoiceRequest> requests = {{a, ca}, {b, cb}};
  scorer.continuation_logprobs(requests);
  int64_t expected = 0;
  for (const ChoiceRequest& r : requests) {
    for (const auto& cont : r.continuations) {
      // EOT + context, then the continuation but its last token.
      expected += KvCache::storage_bytes(model->config(),
                                         static_cast<int64_t>(r.context.size() + cont.size()));
    }
  }
  EXPECT_EQ(scorer.cache_bytes(), static_cast<size_t>(expected));
  scorer.continuation_logprobs(a, ca);
  EXPECT_EQ(scorer.cache_bytes(), static_cast<size_t>(expected)) << "reused, not grown";
}

TEST(EvalScorer, BatchedSamplesEqualTheDecoderLoopPerSample) {
  const BpeTokenizer tok = micro_tokenizer();
  auto model = micro_model();
  ModelScorer scorer(*model, kWindow);
  const std::vector<std::string> prompts = {"count: a b c", "the cat", "x"};
  const std::vector<int64_t> samples = {3, 1, 4}, max_tokens = {12, 5, 40};
  SamplingSettings settings;
  settings.temperature = 1.3;
  settings.top_k = 50;
  std::vector<std::vector<uint32_t>> prompt_ids;
  std::vector<std::vector<Rng>> rngs(prompts.size());
  std::vector<GenerateRequest> requests(prompts.size());
  // Request 2 stops after a token 101 (a stop string, as token ids).
  auto stop = [](const std::vector<uint32_t>& t) { return t.back() == 101; };
  for (size_t k = 0; k < prompts.size(); ++k) prompt_ids.push_back(ids(tok, prompts[k]));
  for (size_t k = 0; k < prompts.size(); ++k) {
    for (int64_t s = 0; s < samples[k]; ++s) rngs[k].emplace_back(100 * k + s);
    requests[k] = {prompt_ids[k], max_tokens[k], settings, &rngs[k], nullptr};
  }
  requests[2].stop_here = stop;
  const auto together = scorer.generate(requests);
  ASSERT_EQ(together.size(), prompts.size());
  size_t lengths = 0;
  std::set<size_t> distinct_lengths;
  for (size_t k = 0; k < prompts.size(); ++k) {
    ASSERT_EQ(together[k].size(), static_cast<size_t>(samples[k]));
    std::vector<int32_t> prompt = {299};
    for (uint32_t t : prompt_ids[k]) prompt.push_back(static_cast<int32_t>(t));
    for (int64_t s = 0; s < samples[k]; ++s) {
      // Today's loop: the prompt into a decoder, then one token at a time.
      Rng rng(100 * k + static_cast<uint64_t>(s));
      GptDecoder dec(*model, static_cast<int64_t>(prompt.size()) + max_tokens[k], kWindow);
      std::vector<float> z = dec.feed(prompt);
      std::vector<uint32_t> out;
      bool eot = false;
      SamplingScratch scratch;
      for (int64_t n = 0; n < max_tokens[k]; ++n) {
        const int32_t next = sample_token(z, 300, settings, rng, scratch);
        if (next == 299) {
          eot = true;
          break;
        }
        out.push_back(static_cast<uint32_t>(next));
        if ((k == 2 && stop(out)) || n + 1 == max_tokens[k]) break;
        z = dec.step(next);
      }
      const GeneratedSample& g = together[k][static_cast<size_t>(s)];
      EXPECT_EQ(g.tokens, out) << "request " << k << " sample " << s;
      EXPECT_EQ(g.hit_eot, eot);
      lengths += out.size();
      distinct_lengths.insert(out.size());
    }
  }
  // Samples ended at different steps, so rows left the batch along the way.
  EXPECT_GT(distinct_lengths.size(), 2u);
  EXPECT_GT(lengths, 20u);
}

TEST(EvalScorer, RefusesTokensOutsideTheVocabulary) {
  auto model = micro_model();
  ModelScorer scorer(*model, kWindow);
  const std::vector<uint32_t> bad = {5, 300};
  EXPECT_THROW(scorer.text_logprob(bad), InputError);
  EXPECT_THROW(scorer.continuation_logprobs(std::vector<uint32_t>{5}, {bad}), InputError);
  EXPECT_THROW(scorer.continuation_logprobs(std::vector<uint32_t>{}, {{5}}), InputError);
}

TEST(EvalSampling, GreedyIsTheFirstArgmaxAndDrawsFollowTheSoftmax) {
  std::vector<float> z = {0.5f, 2.0f, -1.0f, 2.0f, 1.0f, 9.0f};  // 5 is padding: never drawn
  SamplingScratch scratch;
  Rng rng(1);
  SamplingSettings s;
  s.temperature = 0;
  EXPECT_EQ(sample_token(z, 5, s, rng, scratch), 1);  // ties: the lowest id
  s.temperature = 0.7;
  s.top_k = 1;
  EXPECT_EQ(sample_token(z, 5, s, rng, scratch), 1);
  // Frequencies over 200000 draws against softmax(z / T) over the top 3, then over the whole
  // vocabulary (top_k 0: the path without a sort): each within 5 standard deviations of its
  // expectation (deterministic: a fixed seed).
  for (int64_t top_k : {3, 0}) {
    s.top_k = top_k;
    const int n = 200000;
    std::vector<int> count(6, 0);
    for (int i = 0; i < n; ++i) ++count[static_cast<size_t>(sample_token(z, 5, s, rng, scratch))];
    double sum = 0;
    std::vector<double> p(6, 0.0);
    for (int v : top_k == 3 ? std::vector<int>{1, 3, 4} : std::vector<int>{0, 1, 2, 3, 4})
      sum += p[static_cast<size_t>(v)] = std::exp(z[static_cast<size_t>(v)] / 0.7);
    for (int v = 0; v < 6; ++v) {
      const double q = p[static_cast<size_t>(v)] / sum;
      const double sd = std::sqrt(n * q * (1 - q)) + 1e-9;
      EXPECT_NEAR(count[static_cast<size_t>(v)], n * q, 5 * sd + 0.5) << v << " top_k " << top_k;
    }
  }
}

// The whole vocabulary: the draw is where u·Σw falls in the cumulative sum over the ids in
// increasing order. Against that rule in float64 with std::exp, on large random vocabularies at
// several temperatures, the same generator state: the same token, except where u·Σw lies within
// the two computations' difference of a boundary (the weights are fp32 here, within 2 ulp,
// 2.4e-7 relative, so the sums differ by less than 1e-6 of Σw) — counted, and rare.
TEST(EvalSampling, WholeVocabularyDrawsFollowTheCumulativeSumInIdOrder) {
  Rng gen(8);
  SamplingScratch scratch;
  int near_boundary = 0, distinct_from_argmax = 0;
  const int trials = 2000;
  for (int trial = 0; trial < trials; ++trial) {
    const int64_t V = 1 + static_cast<int64_t>(gen.next_u64() % 9000);
    std::vector<float> z(static_cast<size_t>(V) + 5, 80.0f);  // padding: never a candidate
    for (int64_t v = 0; v < V; ++v)
      z[static_cast<size_t>(v)] = static_cast<float>(4 * gen.normal());
    SamplingSettings s;
    s.temperature = 0.25 + 0.25 * (trial % 8);
    Rng a(7000 + static_cast<uint64_t>(trial)), b(7000 + static_cast<uint64_t>(trial));
    const int32_t ours = sample_token(z, V, s, a, scratch);
    ASSERT_GE(ours, 0);
    ASSERT_LT(ours, V);
    const double mx = *std::max_element(z.begin(), z.begin() + V);
    std::vector<double> w(static_cast<size_t>(V));
    double total = 0;
    for (int64_t v = 0; v < V; ++v) {
      total += w[static_cast<size_t>(v)] =
          std::exp((z[static_cast<size_t>(v)] - mx) / s.temperature);
    }
    const double u = b.uniform() * total;
    double cumulative = 0, gap = total;
    int32_t want = static_cast<int32_t>(V - 1);
    for (int64_t v = 0; v < V; ++v) {
      cumulative += w[static_cast<size_t>(v)];
      gap = std::min(gap, std::abs(cumulative - u));
      if (cumulative > u) {
        want = static_cast<int32_t>(v);
        break;
      }
    }
    if (gap < 1e-6 * total) {
      ++near_boundary;
    } else {
      EXPECT_EQ(ours, want) << "trial " << trial << " V " << V;
    }
    distinct_from_argmax += ours != std::max_element(z.begin(), z.begin() + V) - z.begin();
  }
  EXPECT_LT(near_boundary, trials / 100);
  EXPECT_GT(distinct_from_argmax, trials / 4);  // real draws, not the argmax every time
}

// Top-k's draw as it was written first (an indirect partial sort by logit, ties by id), kept as
// the reference: sample_token sorts 64-bit keys instead and must draw the same token from the
// same generator state, on logits with ties, -0 and +0, negative and positive values.
int32_t reference_draw(const std::vector<float>& z, int64_t V, const SamplingSettings& s,
                       Rng& rng) {
  std::vector<int32_t> order(static_cast<size_t>(V));
  std::iota(order.begin(), order.end(), 0);
  const int64_t k = s.top_k > 0 ? std::min<int64_t>(s.top_k, V) : V;
  std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](int32_t x, int32_t y) {
    return z[static_cast<size_t>(x)] > z[static_cast<size_t>(y)] ||
           (z[static_cast<size_t>(x)] == z[static_cast<size_t>(y)] && x < y);
  });
  std::vector<double> probs(static_cast<size_t>(k));
  const double mx = z[static_cast<size_t>(order[0])];
  double sum = 0;
  for (int64_t i = 0; i < k; ++i) {
    sum += probs[static_cast<size_t>(i)] =
        std::exp((z[static_cast<size_t>(order[static_cast<size_t>(i)])] - mx) / s.temperature);
  }
  double u = rng.uniform() * sum;
  for (int64_t i = 0; i < k; ++i) {
    u -= probs[static_cast<size_t>(i)];
    if (u <= 0 || i == k - 1) return order[static_cast<size_t>(i)];
  }
  return order[0];
}

TEST(EvalSampling, TopKDrawsEqualTheIndirectSortReference) {
  Rng gen(5);
  SamplingScratch scratch;
  int distinct_from_argmax = 0;
  for (int trial = 0; trial < 400; ++trial) {
    // More tokens than k, so every draw takes the top-k path.
    const int64_t V = 51 + static_cast<int64_t>(gen.next_u64() % 3000);
    std::vector<float> z(static_cast<size_t>(V) + 7, 50.0f);  // padding: never a candidate
    for (int64_t v = 0; v < V; ++v) {
      // Coarse values (many ties), both zeros, both signs.
      const int64_t q = static_cast<int64_t>(gen.next_u64() % 41) - 20;
      z[static_cast<size_t>(v)] = q == 0 ? (gen.next_u64() % 2 ? -0.0f : 0.0f) : 0.25f * q;
    }
    SamplingSettings s;
    s.temperature = 0.3 + 0.1 * (trial % 20);
    s.top_k = 1 + trial % 50;
    Rng a(1000 + static_cast<uint64_t>(trial)), b(1000 + static_cast<uint64_t>(trial));
    const int32_t ours = sample_token(z, V, s, a, scratch);
    EXPECT_EQ(ours, reference_draw(z, V, s, b)) << "trial " << trial;
    distinct_from_argmax += ours != std::max_element(z.begin(), z.begin() + V) - z.begin();
  }
  EXPECT_GT(distinct_from_argmax, 150);  // real draws, not the argmax every time
}

Suite mixed_suite(int64_t samples, double temperature) {
  const std::string text = R"({"name": "mixed", "cases": [
    {"name": "t0", "kind": "text", "inputs": {"text": "the cat sat on the mat."},
     "evaluators": ["bits_per_byte", "loss"]},
    {"name": "c0", "kind": "choice", "inputs": {"context": "the cat", "choices": [" sat", " ran off"]},
     "expected": 1, "evaluators": ["acc", "acc_norm"]},
    {"name": "g0", "kind": "generate", "inputs": {"prompt": "hello there"}, "expected": "x",
     "generation": {"stop": ["."], "max_tokens": 12, "samples": )" +
                           std::to_string(samples) + R"(, "temperature": )" +
                           std::to_string(temperature) + R"(},
     "evaluators": ["exact_match", {"type": "contains", "value": "e"}]},
    {"name": "g1", "kind": "generate", "inputs": {"prompt": "count: a b c"},
     "generation": {"max_tokens": 20}, "expected": "d", "evaluators": ["exact_match"]}]})";
  return parse_suite(text, "mixed.json");
}

TEST(EvalRunner, GreedyCompletionsEqualTheDecoderArgmaxLoop) {
  const BpeTokenizer tok = micro_tokenizer();
  auto model = micro_model();
  const Suite suite = mixed_suite(1, 0);
  SuiteRunOptions o;
  o.window_blocks = kWindow;
  const EvalReport r = run_suite(suite, tok, {model.get()}, o);
  ASSERT_EQ(r.cases.size(), 4u);
  // g1: no stop string, 20 tokens (unless EOT), greedy.
  std::vector<int32_t> prompt = {299};
  for (uint32_t t : ids(tok, "count: a b c")) prompt.push_back(static_cast<int32_t>(t));
  GptDecoder dec(*model, static_cast<int64_t>(prompt.size()) + 20, kWindow);
  const std::vector<float>* z = &dec.feed(prompt);
  std::vector<uint32_t> out;
  for (int n = 0; n < 20; ++n) {
    const auto best = std::max_element(z->begin(), z->begin() + 300) - z->begin();
    if (best == 299) break;
    out.push_back(static_cast<uint32_t>(best));
    if (n + 1 < 20) z = &dec.step(static_cast<int32_t>(best));
  }
  ASSERT_EQ(r.cases[3].samples.size(), 1u);
  ASSERT_FALSE(out.empty());
  // The scorer's tokens (what the runner decodes) equal the argmax loop's.
  ModelScorer scorer(*model, kWindow);
  std::vector<Rng> rngs(1);
  SamplingSettings greedy;
  greedy.temperature = 0;
  const auto g = scorer.generate(ids(tok, "count: a b c"), 20, greedy, rngs,
                                 [](const std::vector<uint32_t>&) { return false; });
  EXPECT_EQ(g[0].tokens, out);
  // The report's output is that text, with bytes of cut characters as U+FFFD (a random model
  // emits byte tokens freely): valid UTF-8 with the same ASCII.
  const std::string& shown = r.cases[3].samples[0].output;
  EXPECT_EQ(find_invalid_utf8(shown), std::string::npos);
  std::string ascii_shown, ascii_decoded;
  for (char ch : shown)
    if (static_cast<unsigned char>(ch) < 0x80) ascii_shown += ch;
  for (char ch : tok.decode(out))
    if (static_cast<unsigned char>(ch) < 0x80) ascii_decoded += ch;
  EXPECT_EQ(ascii_shown, ascii_decoded);
  // Stop strings are cut off and never kept.
  EXPECT_EQ(r.cases[2].samples[0].output.find('.'), std::string::npos);
}

// Two reports of one suite give the same outputs: completions and log-likelihoods, case by case.
void expect_same_outputs(const EvalReport& x, const EvalReport& y, const std::string& what) {
  ASSERT_EQ(x.cases.size(), y.cases.size()) << what;
  for (size_t i = 0; i < x.cases.size(); ++i) {
    ASSERT_EQ(x.cases[i].samples.size(), y.cases[i].samples.size()) << what;
    for (size_t s = 0; s < x.cases[i].samples.size(); ++s) {
      EXPECT_EQ(x.cases[i].samples[s].output, y.cases[i].samples[s].output) << what;
      EXPECT_EQ(x.cases[i].samples[s].choice_logprobs, y.cases[i].samples[s].choice_logprobs)
          << what;
      EXPECT_EQ(x.cases[i].samples[s].text_logprob, y.cases[i].samples[s].text_logprob) << what;
    }
  }
}

SuiteRunOptions seeded(uint64_t seed) {
  SuiteRunOptions o;
  o.window_blocks = kWindow;
  o.seed = seed;
  return o;
}

TEST(EvalRunner, ReportsDoNotDependOnWorkersAndRepeatsMultiplySamples) {
  const BpeTokenizer tok = micro_tokenizer();
  auto a = micro_model();
  auto b = micro_model();
  const Suite suite = mixed_suite(3, 1.5);
  SuiteRunOptions o = seeded(7);
  o.repeats = 2;
  EvalReport one = run_suite(suite, tok, {a.get()}, o);
  EvalReport two = run_suite(suite, tok, {a.get(), b.get()}, o);
  expect_same_outputs(one, two, "one worker against two");
  // Sampled at temperature 1.5: 3 samples x 2 repeats; the greedy case once.
  EXPECT_EQ(one.cases[2].samples.size(), 6u);
  EXPECT_EQ(one.cases[3].samples.size(), 1u);
  std::set<std::string> distinct;
  for (const auto& s : one.cases[2].samples) distinct.insert(s.output);
  EXPECT_GT(distinct.size(), 1u);  // the samples differ: each has its own stream
  // Another seed, other completions.
  o.seed = 8;
  EvalReport other = run_suite(suite, tok, {a.get()}, o);
  bool differs = false;
  for (size_t s = 0; s < 6; ++s) {
    differs = differs || other.cases[2].samples[s].output != one.cases[2].samples[s].output;
  }
  EXPECT_TRUE(differs);
}

TEST(EvalRunner, WarmUpScoresCasesBeforeTheRunAndChangesNoOutput) {
  const BpeTokenizer tok = micro_tokenizer();
  const Suite suite = mixed_suite(3, 1.5);
  auto a = micro_model();
  SuiteRunOptions o = seeded(7);
  // Profiled, the warm-up shows as more scopes: it scored cases before the run.
  Profiler::start();
  const EvalReport cold = run_suite(suite, tok, {a.get()}, o);
  const size_t cold_events = Profiler::recorded_events();
  Profiler::start();
  o.warmup_cases = 2;
  const EvalReport warm = run_suite(suite, tok, {a.get()}, o);
  const size_t warm_events = Profiler::recorded_events();
  Profiler::stop();
  EXPECT_GT(warm_events, cold_events);
  expect_same_outputs(warm, cold, "warm-up of 2 cases");
  // More cases than the suite has: all of them, once; with two workers, on each model.
  auto b = micro_model();
  o.warmup_cases = 1000;
  expect_same_outputs(run_suite(suite, tok, {a.get(), b.get()}, o), cold, "warm-up of all");
  o.warmup_cases = -1;
  EXPECT_THROW(run_suite(suite, tok, {a.get()}, o), InputError);
}

double brute_force_pass_at_k(const std::vector<bool>& passed, int64_t k) {
  // The fraction of k-subsets with at least one pass.
  const int64_t n = static_cast<int64_t>(passed.size());
  int64_t subsets = 0, hits = 0;
  for (uint32_t mask = 0; mask < (1u << n); ++mask) {
    if (__builtin_popcount(mask) != k) continue;
    ++subsets;
    bool any = false;
    for (int64_t i = 0; i < n; ++i) any = any || (((mask >> i) & 1u) != 0 && passed[i]);
    hits += any;
  }
  return static_cast<double>(hits) / static_cast<double>(subsets);
}

TEST(EvalReport, PassAtKFromRepeatsEqualsEnumeration) {
  // A case with 7 samples, 3 passing, and one with 7 all failing.
  EvalReport r;
  r.suite = "s";
  const std::vector<bool> passed = {false, true, false, false, true, true, false};
  for (int c = 0; c < 2; ++c) {
    CaseRecord rec;
    rec.name = "c";
    rec.name += std::to_string(c);
    for (bool p : passed) {
      SampleRecord s;
      EvaluatorOutcome o;
      o.evaluator = "exact_match";
      o.kind = OutcomeKind::kAssertion;
      o.passed = c == 0 && p;
      o.value = o.passed ? 1 : 0;
      s.outcomes.push_back(o);
      rec.samples.push_back(s);
    }
    r.cases.push_back(rec);
  }
  summarize_report(r);
  const EvaluatorSummary& s = r.cases[0].summaries.at(0);
  EXPECT_EQ(s.n, 7);
  EXPECT_EQ(s.passed, 3);
  EXPECT_FALSE(s.case_passed);  // 3 of 7: fewer than half
  EXPECT_NEAR(s.mean, 3.0 / 7, 1e-15);
  const std::vector<int64_t> ks = {1, 2, 4, 7};
  ASSERT_EQ(s.pass_at_k.size(), ks.size());
  for (size_t i = 0; i < ks.size(); ++i) {
    EXPECT_EQ(s.pass_at_k[i].first, ks[i]);
    EXPECT_NEAR(s.pass_at_k[i].second, brute_force_pass_at_k(passed, ks[i]), 1e-12) << ks[i];
  }
  ASSERT_EQ(r.averages.size(), 1u);
  EXPECT_EQ(r.averages[0].cases, 2);
  EXPECT_NEAR(r.averages[0].mean, 1.5 / 7, 1e-15);
  // Standard error of {3/7, 0}: s = (3/7)/√2, over √2.
  EXPECT_NEAR(r.averages[0].standard_error, 3.0 / 7 / 2, 1e-15);
  EXPECT_NEAR(r.averages[0].pass_at_k[0].second, 1.5 / 7, 1e-15);
}

TEST(EvalReport, JsonRoundTripsByteForByte) {
  const BpeTokenizer tok = micro_tokenizer();
  auto model = micro_model();
  SuiteRunOptions o;
  o.window_blocks = kWindow;
  o.repeats = 2;
  EvalReport r = run_suite(mixed_suite(2, 0.8), tok, {model.get()}, o);
  r.checkpoint = "ckpt";
  r.tokenizer = "tok";
  // Values JSON cannot hold: written as null, read as NaN, written as null again.
  r.cases[0].samples[0].text_logprob = std::nan("");
  const std::string first = report_json(r);
  const EvalReport back = parse_report(first, "r.json");
  EXPECT_EQ(report_json(back), first);
  EXPECT_EQ(back.cases.size(), r.cases.size());
  EXPECT_EQ(back.cases[1].samples[0].choice_logprobs, r.cases[1].samples[0].choice_logprobs);
  // The Markdown and the table name every case and the averages.
  const std::string md = report_markdown(back), table = report_table(back);
  for (const char* name : {"t0", "c0", "g0", "g1", "averages", "bits_per_byte"}) {
    EXPECT_NE(md.find(name), std::string::npos) << name;
    EXPECT_NE(table.find(name), std::string::npos) << name;
  }
}

TEST(EvalReport, OneLineCutsByCodePointsAndEscapes) {
  EXPECT_EQ(one_line("a|b\nc", 10), "a\\|b\\nc");
  EXPECT_EQ(one_line("héllo wörld", 5), "héll…");
  EXPECT_EQ(one_line("héllo", 5), "héllo");
  EXPECT_EQ(one_line_tail("few shots\nQuestion: 2+2?", 8), "…n: 2+2?");
  EXPECT_EQ(one_line_tail("wörld", 5), "wörld");
  EXPECT_EQ(one_line_tail("héllo wörld", 4), "…rld");
}

TEST(EvalReport, BadReportsNameTheFileAndField) {
  auto expect_error = [](const std::string& text, const std::vector<std::string>& parts) {
    try {
      parse_report(text, "bad.json");
      ADD_FAILURE() << "no error for " << text;
    } catch (const InputError& e) {
      for (const auto& p : parts)
        EXPECT_NE(std::string(e.what()).find(p), std::string::npos) << e.what();
    }
  };
  expect_error("{", {"bad.json", "JSON"});
  expect_error(R"({"format": "x"})", {"bad.json", "format"});
  EvalReport r;
  r.suite = "s";
  CaseRecord c;
  c.name = "case-a";
  r.cases.push_back(c);
  std::string good = report_json(r);
  std::string bad = good;
  bad.replace(bad.find("\"kind\": \"generate\""), 18, "\"kind\": \"bogus\"");
  expect_error(bad, {"bad.json", "case 0 'case-a'", "kind", "bogus"});
  bad = good;
  bad.replace(bad.find("\"samples\": []"), 13, "\"samples\": 3");
  expect_error(bad, {"bad.json", "case-a", "samples"});
}

TEST(EvalRunner, RefusesATokenizerThatDoesNotFitTheCheckpoint) {
  const BpeTokenizer tok = micro_tokenizer();
  Suite s = mixed_suite(1, 0);
  Config c = fp32_micro();
  EXPECT_NO_THROW(check_tokenizer_fits(s, tok, "tok.json", c));
  c.vocab_size = 290;  // fewer than the tokenizer's 300
  try {
    check_tokenizer_fits(s, tok, "tok.json", c);
    ADD_FAILURE();
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("300 tokens"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("290"), std::string::npos) << e.what();
  }
  c = fp32_micro();
  c.eot_id = 5;
  EXPECT_THROW(check_tokenizer_fits(s, tok, "tok.json", c), InputError);
  // A suite written for another tokenizer (by sha256), or a name that is not this one.
  c = fp32_micro();
  s.tokenizer = std::string(64, 'a');
  try {
    check_tokenizer_fits(s, tok, "tok.json", c);
    ADD_FAILURE();
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("mixed.json"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("'tokenizer'"), std::string::npos) << e.what();
  }
  s.tokenizer = tok.sha256();
  EXPECT_NO_THROW(check_tokenizer_fits(s, tok, "tok.json", c));
  s.tokenizer = "tok.json";
  EXPECT_NO_THROW(check_tokenizer_fits(s, tok, "tok.json", c));
  s.tokenizer = "gpt2";
  EXPECT_THROW(check_tokenizer_fits(s, tok, "tok.json", c), InputError);
}

}  // namespace
}  // namespace nanogpt
