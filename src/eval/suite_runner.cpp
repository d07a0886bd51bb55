#include "eval/suite_runner.hpp"

#include <algorithm>
#include <chrono>
#include <memory>
#include <mutex>
#include <string>

#include "data/utf8.hpp"
#include "eval/model_scorer.hpp"
#include "runtime/error.hpp"
#include "runtime/file_io.hpp"
#include "runtime/thread_pool.hpp"

namespace nanogpt {

namespace {

uint64_t mix(uint64_t x) {
  Rng r(x);
  return r.next_u64();
}

bool is_hex_sha256(const std::string& s) {
  if (s.size() != 64) return false;
  for (char ch : s) {
    if (!((ch >= '0' && ch <= '9') || (ch >= 'a' && ch <= 'f'))) return false;
  }
  return true;
}

std::vector<uint32_t> encode(const BpeTokenizer& tok, const std::string& text) {
  return tok.encode(text, false);
}

// Where the first stop string starts in `text`, or npos.
size_t first_stop(const std::string& text, const std::vector<std::string>& stop) {
  size_t at = std::string::npos;
  for (const std::string& s : stop) at = std::min(at, text.find(s));
  return at;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// What scoring saw of one case, before the evaluators judge it.
struct Observed {
  std::vector<Observation> obs;
  std::vector<int64_t> generated;  // tokens per completion
};

// Samples a generate case draws: samples × repeats when sampled at a temperature above 0.
int64_t samples_of(const SuiteCase& c, const SuiteRunOptions& o) {
  const GenerationSettings& g = c.generation;
  return g.temperature > 0 ? g.samples * o.repeats : g.samples;
}

// Consecutive cases scored by one call: text cases alone; choice cases up to kChoiceCases;
// generate cases up to kGenerateRows samples and kGenerateCases cases. Either also stops at
// kCacheBytes of K/V caches (at least one case per batch). Fixed by the suite and the repeats
// (samples × repeats per sampled case), so the batches, hence every result, do not depend on
// the number of workers.
// Measured on fortunes-choice and a 4-sample addition suite (2 cores): 8 and 16 choice cases
// alike, 32 slower (activations leave the cache); 256 generate rows ~5% faster than 64 (each
// step's products pack their weights once for more rows). Since a cached forward keeps one
// block's activations (AMD EPYC Zen 5, 100 cases, best of 7 runs per round, two rounds each):
// 4 cases 0.54–0.55 s, 8 0.54–0.56 (one noisy round 0.61), 12 0.55–0.57, 16 0.57–0.58, 32
// 0.60–0.61.
constexpr size_t kChoiceCases = 8, kGenerateCases = 64;
constexpr int64_t kGenerateRows = 256;
constexpr int64_t kCacheBytes = int64_t{256} << 20;

struct Batch {
  size_t begin, end;  // cases [begin, end)
};

std::vector<Batch> plan_batches(const Suite& suite, const Config& config,
                                const SuiteRunOptions& o) {
  const int64_t position_bytes = KvCache(config, 1).bytes();
  // At most the K/V positions a case's caches take (one cache per choice or sample): a text
  // has at most one token per byte, so bytes bound tokens without tokenizing twice.
  auto positions = [&](const SuiteCase& c) -> int64_t {
    if (c.kind == CaseKind::kChoice) {
      int64_t longest = 0;
      for (const std::string& ch : c.choices)
        longest = std::max(longest, static_cast<int64_t>(ch.size()));
      const int64_t context = static_cast<int64_t>(c.context.size()) + 1;
      return (context + longest) * static_cast<int64_t>(c.choices.size());
    }
    const int64_t max_tokens =
        c.generation.max_tokens > 0 ? c.generation.max_tokens : o.unbounded_max_tokens;
    const int64_t prompt = static_cast<int64_t>(c.prompt.size()) + 1;
    return (prompt + max_tokens) * samples_of(c, o);
  };
  std::vector<Batch> batches;
  size_t i = 0;
  while (i < suite.cases.size()) {
    const CaseKind kind = suite.cases[i].kind;
    size_t end = i + 1;
    if (kind != CaseKind::kText) {
      int64_t bytes = positions(suite.cases[i]) * position_bytes;
      int64_t rows = kind == CaseKind::kGenerate ? samples_of(suite.cases[i], o) : 0;
      const size_t most = kind == CaseKind::kChoice ? kChoiceCases : kGenerateCases;
      while (end < suite.cases.size() && end - i < most && suite.cases[end].kind == kind) {
        const SuiteCase& c = suite.cases[end];
        const int64_t more_bytes = positions(c) * position_bytes;
        const int64_t more_rows = kind == CaseKind::kGenerate ? samples_of(c, o) : 0;
        if (bytes + more_bytes > kCacheBytes || rows + more_rows > kGenerateRows) break;
        bytes += more_bytes;
        rows += more_rows;
        ++end;
      }
    }
    batches.push_back({i, end});
    i = end;
  }
  return batches;
}

// Scores cases [b.begin, b.end), all of one kind, in one scorer call.
std::vector<Observed> observe_batch(const Suite& suite, Batch b, const BpeTokenizer& tok,
                                    ModelScorer& scorer, const SuiteRunOptions& o) {
  std::vector<Observed> out(b.end - b.begin);
  const CaseKind kind = suite.cases[b.begin].kind;
  if (kind == CaseKind::kText) {
    for (size_t i = b.begin; i < b.end; ++i) {
      const SuiteCase& c = suite.cases[i];
      Observation ob;
      const std::vector<uint32_t> ids = encode(tok, c.text);
      ob.text_logprob = scorer.text_logprob(ids);
      ob.text_tokens = static_cast<int64_t>(ids.size());
      out[i - b.begin].obs.push_back(ob);
    }
  } else if (kind == CaseKind::kChoice) {
    std::vector<std::vector<uint32_t>> contexts;
    std::vector<std::vector<std::vector<uint32_t>>> conts;
    for (size_t i = b.begin; i < b.end; ++i) {
      const SuiteCase& c = suite.cases[i];
      contexts.push_back(encode(tok, c.context));
      conts.emplace_back();
      for (const std::string& ch : c.choices) conts.back().push_back(encode(tok, ch));
    }
    std::vector<ChoiceRequest> requests;
    for (size_t k = 0; k < contexts.size(); ++k) requests.push_back({contexts[k], conts[k]});
    std::vector<std::vector<double>> lps = scorer.continuation_logprobs(requests);
    for (size_t k = 0; k < lps.size(); ++k) {
      Observation ob;
      ob.choice_logprobs = std::move(lps[k]);
      out[k].obs.push_back(ob);
    }
  } else {
    const size_t n = b.end - b.begin;
    std::vector<std::vector<uint32_t>> prompts(n);
    std::vector<std::vector<Rng>> rngs(n);
    std::vector<GenerateRequest> requests(n);
    for (size_t k = 0; k < n; ++k) {
      const size_t index = b.begin + k;
      const SuiteCase& c = suite.cases[index];
      const GenerationSettings& g = c.generation;
      for (int64_t s = 0; s < samples_of(c, o); ++s) {
        rngs[k].emplace_back(mix(mix(mix(o.seed) + index) + static_cast<uint64_t>(s)));
      }
      prompts[k] = encode(tok, c.prompt);
      GenerateRequest& r = requests[k];
      r.prompt = prompts[k];
      r.settings.temperature = g.temperature;
      r.settings.top_k = g.top_k;
      r.max_tokens = g.max_tokens > 0 ? g.max_tokens : o.unbounded_max_tokens;
      r.rngs = &rngs[k];
      if (!g.stop.empty()) {
        r.stop_here = [&tok, &g](const std::vector<uint32_t>& tokens) {
          return first_stop(tok.decode(tokens), g.stop) != std::string::npos;
        };
      }
    }
    const auto samples = scorer.generate(requests);
    for (size_t k = 0; k < n; ++k) {
      const GenerationSettings& g = suite.cases[b.begin + k].generation;
      for (const GeneratedSample& s : samples[k]) {
        Observation ob;
        out[k].generated.push_back(static_cast<int64_t>(s.tokens.size()));
        ob.output = tok.decode(s.tokens);
        const size_t cut = first_stop(ob.output, g.stop);
        if (cut != std::string::npos) ob.output.resize(cut);
        // A completion can end inside a character (tokens are bytes): evaluators and the
        // JSON report see U+FFFD there.
        ob.output = valid_utf8(ob.output);
        out[k].obs.push_back(ob);
      }
    }
  }
  return out;
}

CaseRecord judge_case(const Suite& suite, size_t index, Observed observed, double seconds) {
  const SuiteCase& c = suite.cases[index];
  CaseRecord rec;
  rec.name = c.name;
  rec.kind = c.kind;
  rec.inputs = case_inputs_json(c);
  rec.expected = case_expected_json(c);
  rec.duration_seconds = seconds;
  const std::vector<const Evaluator*> evaluators = suite.evaluators_for(c);
  for (size_t k = 0; k < observed.obs.size(); ++k) {
    Observation& ob = observed.obs[k];
    ob.duration_seconds = rec.duration_seconds;  // max_duration judges the whole case
    SampleRecord s;
    s.output = ob.output;
    s.generated_tokens = k < observed.generated.size() ? observed.generated[k] : 0;
    s.duration_seconds = ob.duration_seconds;
    s.choice_logprobs = ob.choice_logprobs;
    s.text_logprob = ob.text_logprob;
    s.text_tokens = ob.text_tokens;
    for (const Evaluator* e : evaluators) s.outcomes.push_back(e->evaluate(c, ob));
    rec.samples.push_back(std::move(s));
  }
  return rec;
}

// Runs one batch into report.cases. A case's duration is its share of the batch's time (the
// batch's wall time over its cases). An InputError names the case: a batch that fails is run
// again case by case to find it.
void run_batch(const Suite& suite, Batch b, const BpeTokenizer& tok, ModelScorer& scorer,
               const SuiteRunOptions& o, EvalReport& report) {
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<Observed> observed;
  try {
    observed = observe_batch(suite, b, tok, scorer, o);
  } catch (const InputError& e) {
    if (b.end - b.begin > 1) {
      for (size_t i = b.begin; i < b.end; ++i) run_batch(suite, {i, i + 1}, tok, scorer, o, report);
    }
    throw InputError("case '" + suite.cases[b.begin].name + "': " + e.what());
  }
  const double seconds = seconds_since(t0) / static_cast<double>(b.end - b.begin);
  for (size_t i = b.begin; i < b.end; ++i) {
    report.cases[i] = judge_case(suite, i, std::move(observed[i - b.begin]), seconds);
  }
}

// SuiteRunOptions::warmup_cases: the run's own batches cut at that many cases, on each model
// in turn (with several, each on a single-thread pool, as its worker runs), results dropped.
void warm_up(const Suite& suite, const std::vector<Batch>& batches, const BpeTokenizer& tok,
             const std::vector<std::unique_ptr<ModelScorer>>& scorers, const SuiteRunOptions& o) {
  const size_t end = static_cast<size_t>(
      std::min<int64_t>(o.warmup_cases, static_cast<int64_t>(suite.cases.size())));
  if (end == 0) return;
  ThreadPool single(1);
  for (const std::unique_ptr<ModelScorer>& scorer : scorers) {
    ThreadPool& pool = scorers.size() == 1 ? ThreadPool::current() : single;
    const ThreadPool::Use use(pool);
    for (const Batch& b : batches) {
      if (b.begin >= end) break;
      observe_batch(suite, {b.begin, std::min(b.end, end)}, tok, *scorer, o);
    }
  }
}

}  // namespace

void check_tokenizer_fits(const Suite& suite, const BpeTokenizer& tokenizer,
                          const std::string& spec, const Config& config) {
  if (static_cast<int64_t>(tokenizer.vocab_size()) > config.vocab_size) {
    throw InputError("the tokenizer '" + spec + "' has " + std::to_string(tokenizer.vocab_size()) +
                     " tokens but the checkpoint's vocabulary has " +
                     std::to_string(config.vocab_size) +
                     ": they were not trained together (pass the checkpoint's tokenizer)");
  }
  if (static_cast<int64_t>(tokenizer.eot_id()) != config.eot_id) {
    throw InputError("the tokenizer '" + spec + "' ends documents with token " +
                     std::to_string(tokenizer.eot_id()) + ", the checkpoint with " +
                     std::to_string(config.eot_id) + ": they were not trained together");
  }
  const std::string& want = suite.tokenizer;
  if (want.empty() || want == spec || want == tokenizer.sha256()) return;
  std::string want_sha;
  if (is_hex_sha256(want)) {
    want_sha = want;
  } else if (file_exists(want)) {
    want_sha = BpeTokenizer::load(want).sha256();
    if (want_sha == tokenizer.sha256()) return;
  }
  throw InputError("suite '" + suite.path + "': field 'tokenizer': the suite was written for '" +
                   want + "'" + (want_sha.empty() ? "" : " (sha256 " + want_sha + ")") +
                   ", the checkpoint uses '" + spec + "' (sha256 " + tokenizer.sha256() +
                   "); evaluate with that tokenizer's suites or pass --tokenizer");
}

EvalReport run_suite(const Suite& suite, const BpeTokenizer& tokenizer,
                     const std::vector<Gpt*>& models, const SuiteRunOptions& options) {
  if (models.empty()) throw Error("internal: run_suite needs at least one model");
  if (options.repeats < 1) throw InputError("repeats must be at least 1");
  if (options.warmup_cases < 0) throw InputError("warmup cases must be at least 0");
  std::vector<std::unique_ptr<ModelScorer>> scorers;
  for (Gpt* m : models) scorers.push_back(std::make_unique<ModelScorer>(*m, options.window_blocks));
  const std::vector<Batch> batches = plan_batches(suite, models[0]->config(), options);
  warm_up(suite, batches, tokenizer, scorers, options);
  const auto t0 = std::chrono::steady_clock::now();
  EvalReport report;
  report.suite = suite.name;
  report.suite_path = suite.path;
  report.seed = options.seed;
  report.repeats = options.repeats;
  report.threads = static_cast<int64_t>(models.size());
  report.cases.resize(suite.cases.size());
  std::mutex mutex;
  size_t done = 0;
  auto finished = [&] {
    if (!options.progress) return;
    const std::lock_guard<std::mutex> lock(mutex);
    options.progress(++done, suite.cases.size());
  };
  if (models.size() == 1) {
    for (const Batch& b : batches) {
      run_batch(suite, b, tokenizer, *scorers[0], options, report);
      for (size_t i = b.begin; i < b.end; ++i) finished();
    }
  } else {
    // One worker per model; each worker's kernels single-threaded, on a pool of its own.
    ThreadPool workers(static_cast<int>(models.size()));
    std::vector<std::unique_ptr<ThreadPool>> own;
    for (size_t w = 0; w < models.size(); ++w) own.push_back(std::make_unique<ThreadPool>(1));
    workers.parallel_for(batches.size(), [&](size_t k, int worker) {
      const ThreadPool::Use single(*own[static_cast<size_t>(worker)]);
      const Batch& b = batches[k];
      run_batch(suite, b, tokenizer, *scorers[static_cast<size_t>(worker)], options, report);
      for (size_t i = b.begin; i < b.end; ++i) finished();
    });
  }
  summarize_report(report);
  report.duration_seconds = seconds_since(t0);
  return report;
}

}  // namespace nanogpt
