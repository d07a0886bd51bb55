#include "eval/fortunes_suites.hpp"

#include <algorithm>
#include <cstdlib>
#include <numeric>

#include "data/token_shard.hpp"
#include "runtime/error.hpp"
#include "runtime/file_io.hpp"
#include "runtime/random.hpp"

namespace nanogpt {

std::vector<std::string> shard_documents(const std::string& pattern,
                                         const BpeTokenizer& tokenizer) {
  const std::vector<std::string> files = glob_sorted(pattern);
  if (files.empty()) {
    throw InputError("no token shards match '" + pattern +
                     "' (run `nanogpt prepare fortunes` first, or give --data)");
  }
  const uint32_t eot = tokenizer.eot_id();
  std::vector<std::string> docs;
  std::vector<uint32_t> doc;
  auto flush = [&] {
    if (!doc.empty()) docs.push_back(tokenizer.decode(doc));
    doc.clear();
  };
  for (const std::string& f : files) {
    const MappedFile file(f);
    for (uint16_t t : shard_tokens(file)) {
      if (t == eot) {
        flush();
      } else {
        if (t >= tokenizer.vocab_size()) {
          throw InputError("shard '" + f + "' holds token " + std::to_string(t) +
                           ", outside the tokenizer's " + std::to_string(tokenizer.vocab_size()) +
                           " (another tokenizer wrote it)");
        }
        doc.push_back(t);
      }
    }
  }
  flush();  // the shards are one stream: a document may continue into the next file
  return docs;
}

namespace {

void add_suite_evaluators(Suite& s, std::initializer_list<const char*> names) {
  for (const char* n : names) {
    s.evaluators.push_back(make_evaluator(nlohmann::ordered_json(n), "", "evaluators"));
  }
}

void check_enough(size_t have, int64_t want, const char* what) {
  if (static_cast<int64_t>(have) < want) {
    throw InputError(std::string(what) + ": only " + std::to_string(have) +
                     " held-out fortunes qualify, " + std::to_string(want) +
                     " cases asked; ask for fewer --cases");
  }
}

// Where to cut: the space nearest the middle (the ending keeps it), or npos if none leaves a
// non-blank context and ending.
size_t cut_point(const std::string& text) {
  const size_t mid = text.size() / 2;
  size_t best = std::string::npos;
  for (size_t i = 1; i + 1 < text.size(); ++i) {
    if (text[i] != ' ') continue;
    const auto dist = [&](size_t k) { return k > mid ? k - mid : mid - k; };
    if (best == std::string::npos || dist(i) < dist(best)) best = i;
  }
  if (best == std::string::npos) return best;
  const std::string context = text.substr(0, best);
  if (context.find_first_not_of(" \n\t") == std::string::npos) return std::string::npos;
  return best;
}

}  // namespace

Suite make_fortunes_bpb_suite(const std::vector<std::string>& documents,
                              const FortunesSuiteOptions& o) {
  Suite s;
  s.name = "fortunes-bpb";
  s.description = "Bits per byte of held-out fortunes (the validation shards' documents)";
  s.tokenizer = o.tokenizer;
  add_suite_evaluators(s, {"bits_per_byte", "loss", "perplexity"});
  for (const std::string& d : documents) {
    if (static_cast<int64_t>(s.cases.size()) == o.cases) break;
    if (static_cast<int64_t>(d.size()) < o.min_bytes) continue;
    SuiteCase c;
    c.name = "fortune-bpb-" + std::to_string(s.cases.size());
    c.kind = CaseKind::kText;
    c.text = d;
    s.cases.push_back(std::move(c));
  }
  check_enough(s.cases.size(), o.cases, "fortunes-bpb");
  validate_suite(s);
  return s;
}

Suite make_fortunes_choice_suite(const std::vector<std::string>& documents,
                                 const FortunesSuiteOptions& o) {
  struct Split {
    std::string context, ending;
  };
  std::vector<Split> pool;
  for (const std::string& d : documents) {
    if (static_cast<int64_t>(d.size()) < o.min_bytes ||
        static_cast<int64_t>(d.size()) > o.max_bytes) {
      continue;
    }
    const size_t cut = cut_point(d);
    if (cut == std::string::npos) continue;
    pool.push_back({d.substr(0, cut), d.substr(cut)});
  }
  check_enough(pool.size(), std::max<int64_t>(o.cases, 4), "fortunes-choice");
  Rng rng(o.seed);
  std::vector<size_t> order(pool.size());
  std::iota(order.begin(), order.end(), size_t{0});
  for (size_t i = order.size(); i > 1; --i) std::swap(order[i - 1], order[rng.next_u64() % i]);
  // Fortunes by ending length, to find similar-length distractors.
  std::vector<size_t> by_len(pool.size());
  std::iota(by_len.begin(), by_len.end(), size_t{0});
  std::stable_sort(by_len.begin(), by_len.end(), [&](size_t a, size_t b) {
    return pool[a].ending.size() < pool[b].ending.size();
  });
  std::vector<size_t> rank(pool.size());
  for (size_t r = 0; r < by_len.size(); ++r) rank[by_len[r]] = r;

  Suite s;
  s.name = "fortunes-choice";
  s.description =
      "HellaSwag-style: the start of a held-out fortune, its real ending and three endings of "
      "other held-out fortunes of similar length";
  s.tokenizer = o.tokenizer;
  add_suite_evaluators(s, {"acc", "acc_norm", "acc_bytes"});
  for (int64_t n = 0; n < o.cases; ++n) {
    const size_t idx = order[static_cast<size_t>(n)];
    const Split& f = pool[idx];
    // The 12 nearest other fortunes in ending length (either side of this one's rank).
    std::vector<size_t> near;
    const size_t r = rank[idx];
    for (size_t step = 1; near.size() < 12 && step < pool.size(); ++step) {
      if (r >= step) near.push_back(by_len[r - step]);
      if (near.size() < 12 && r + step < pool.size()) near.push_back(by_len[r + step]);
    }
    std::vector<std::string> choices = {f.ending};
    while (choices.size() < 4 && !near.empty()) {
      const size_t k = static_cast<size_t>(rng.next_u64() % near.size());
      const std::string& e = pool[near[k]].ending;
      near.erase(near.begin() + static_cast<std::ptrdiff_t>(k));
      if (std::find(choices.begin(), choices.end(), e) == choices.end()) choices.push_back(e);
    }
    if (choices.size() < 4) continue;  // too few distinct endings nearby (never with real data)
    // Shuffle; the gold index follows the real ending.
    std::vector<size_t> perm = {0, 1, 2, 3};
    for (size_t i = 4; i > 1; --i) std::swap(perm[i - 1], perm[rng.next_u64() % i]);
    SuiteCase c;
    c.name = "fortune-choice-" + std::to_string(s.cases.size());
    c.kind = CaseKind::kChoice;
    c.context = f.context;
    for (size_t i = 0; i < 4; ++i) {
      c.choices.push_back(choices[perm[i]]);
      if (perm[i] == 0) c.gold = static_cast<int64_t>(i);
    }
    s.cases.push_back(std::move(c));
  }
  validate_suite(s);
  return s;
}

}  // namespace nanogpt
