#include "eval/suite_runner.hpp"

#include <chrono>
#include <memory>
#include <mutex>

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

// Each byte that does not start a valid UTF-8 character becomes U+FFFD.
std::string valid_utf8(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    uint32_t cp = 0;
    const int len = decode_utf8(s, i, &cp);
    if (len == 0) {
      out += "\xEF\xBF\xBD";
      ++i;
    } else {
      out.append(s, i, static_cast<size_t>(len));
      i += static_cast<size_t>(len);
    }
  }
  return out;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

CaseRecord run_case(const Suite& suite, size_t index, const BpeTokenizer& tok, ModelScorer& scorer,
                    const SuiteRunOptions& o) {
  const SuiteCase& c = suite.cases[index];
  CaseRecord rec;
  rec.name = c.name;
  rec.kind = c.kind;
  rec.inputs = case_inputs_json(c);
  rec.expected = case_expected_json(c);
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<Observation> obs;
  std::vector<int64_t> generated;  // tokens per completion
  const std::string where = "case '" + c.name + "': ";
  try {
    switch (c.kind) {
      case CaseKind::kText: {
        Observation ob;
        const std::vector<uint32_t> ids = encode(tok, c.text);
        ob.text_logprob = scorer.text_logprob(ids);
        ob.text_tokens = static_cast<int64_t>(ids.size());
        obs.push_back(ob);
        break;
      }
      case CaseKind::kChoice: {
        std::vector<std::vector<uint32_t>> conts;
        for (const std::string& ch : c.choices) conts.push_back(encode(tok, ch));
        Observation ob;
        ob.choice_logprobs = scorer.continuation_logprobs(encode(tok, c.context), conts);
        obs.push_back(ob);
        break;
      }
      case CaseKind::kGenerate: {
        const GenerationSettings& g = c.generation;
        const bool random = g.temperature > 0;
        const int64_t n = random ? g.samples * o.repeats : g.samples;
        std::vector<Rng> rngs;
        for (int64_t s = 0; s < n; ++s) {
          rngs.emplace_back(mix(mix(mix(o.seed) + index) + static_cast<uint64_t>(s)));
        }
        SamplingSettings ss;
        ss.temperature = g.temperature;
        ss.top_k = g.top_k;
        const int64_t max_tokens = g.max_tokens > 0 ? g.max_tokens : o.unbounded_max_tokens;
        auto stop_here = [&](const std::vector<uint32_t>& tokens) {
          return !g.stop.empty() && first_stop(tok.decode(tokens), g.stop) != std::string::npos;
        };
        const auto samples =
            scorer.generate(encode(tok, c.prompt), max_tokens, ss, rngs, stop_here);
        for (const GeneratedSample& s : samples) {
          Observation ob;
          generated.push_back(static_cast<int64_t>(s.tokens.size()));
          ob.output = tok.decode(s.tokens);
          const size_t cut = first_stop(ob.output, g.stop);
          if (cut != std::string::npos) ob.output.resize(cut);
          // A completion can end inside a character (tokens are bytes): evaluators and the
          // JSON report see U+FFFD there.
          ob.output = valid_utf8(ob.output);
          obs.push_back(ob);
        }
        break;
      }
    }
  } catch (const InputError& e) {
    throw InputError(where + e.what());
  }
  rec.duration_seconds = seconds_since(t0);
  const std::vector<const Evaluator*> evaluators = suite.evaluators_for(c);
  for (size_t k = 0; k < obs.size(); ++k) {
    Observation& ob = obs[k];
    ob.duration_seconds = rec.duration_seconds;  // max_duration judges the whole case
    SampleRecord s;
    s.output = ob.output;
    s.generated_tokens = k < generated.size() ? generated[k] : 0;
    s.duration_seconds = ob.duration_seconds;
    s.choice_logprobs = ob.choice_logprobs;
    s.text_logprob = ob.text_logprob;
    s.text_tokens = ob.text_tokens;
    for (const Evaluator* e : evaluators) s.outcomes.push_back(e->evaluate(c, ob));
    rec.samples.push_back(std::move(s));
  }
  return rec;
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
  const auto t0 = std::chrono::steady_clock::now();
  EvalReport report;
  report.suite = suite.name;
  report.suite_path = suite.path;
  report.seed = options.seed;
  report.repeats = options.repeats;
  report.threads = static_cast<int64_t>(models.size());
  report.cases.resize(suite.cases.size());
  std::vector<std::unique_ptr<ModelScorer>> scorers;
  for (Gpt* m : models) scorers.push_back(std::make_unique<ModelScorer>(*m, options.window_blocks));
  std::mutex mutex;
  size_t done = 0;
  auto finished = [&] {
    if (!options.progress) return;
    const std::lock_guard<std::mutex> lock(mutex);
    options.progress(++done, suite.cases.size());
  };
  if (models.size() == 1) {
    for (size_t i = 0; i < suite.cases.size(); ++i) {
      report.cases[i] = run_case(suite, i, tokenizer, *scorers[0], options);
      finished();
    }
  } else {
    // One worker per model; each worker's kernels single-threaded, on a pool of its own.
    ThreadPool workers(static_cast<int>(models.size()));
    std::vector<std::unique_ptr<ThreadPool>> own;
    for (size_t w = 0; w < models.size(); ++w) own.push_back(std::make_unique<ThreadPool>(1));
    workers.parallel_for(suite.cases.size(), [&](size_t i, int worker) {
      const ThreadPool::Use single(*own[static_cast<size_t>(worker)]);
      report.cases[i] =
          run_case(suite, i, tokenizer, *scorers[static_cast<size_t>(worker)], options);
      finished();
    });
  }
  summarize_report(report);
  report.duration_seconds = seconds_since(t0);
  return report;
}

}  // namespace nanogpt
