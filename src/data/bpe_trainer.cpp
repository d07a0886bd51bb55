#include "data/bpe_trainer.hpp"

#include <algorithm>
#include <queue>
#include <string>
#include <unordered_map>

#include "data/gpt2_pretokenizer.hpp"
#include "data/utf8.hpp"
#include "runtime/error.hpp"

namespace nanogpt {

namespace {

using PairKey = uint64_t;
PairKey pair_key(uint32_t l, uint32_t r) {
  return (uint64_t(l) << 32) | r;
}
uint32_t pair_left(PairKey k) {
  return static_cast<uint32_t>(k >> 32);
}
uint32_t pair_right(PairKey k) {
  return static_cast<uint32_t>(k);
}

struct Word {
  std::vector<uint32_t> symbols;
  int64_t count;
};

struct HeapEntry {
  int64_t count;
  PairKey pair;
  // Max-heap on count; on ties the smaller pair wins, which keeps training deterministic.
  bool operator<(const HeapEntry& o) const {
    return count != o.count ? count < o.count : pair > o.pair;
  }
};

}  // namespace

BpeTokenizer train_bpe(const CorpusOptions& corpus, const BpeTrainOptions& options,
                       BpeTrainReport* report) {
  std::vector<std::string> specials = {std::string(kEndOfText)};
  if (options.chat_tokens) {
    specials.insert(specials.end(), kChatSpecialTokens.begin(), kChatSpecialTokens.end());
  }
  const uint32_t smallest = 256 + static_cast<uint32_t>(specials.size());
  if (options.vocab_size < smallest) {
    throw InputError("--vocab-size " + std::to_string(options.vocab_size) +
                     " is too small: a byte-level BPE needs 256 byte tokens plus " +
                     std::string(kEndOfText) +
                     (options.chat_tokens ? " and the 4 chat tokens" : "") + " (at least " +
                     std::to_string(smallest) +
                     (options.chat_tokens ? "; --no-chat-tokens leaves those out)" : ")"));
  }
  BpeTrainReport rep;

  // 1. Count distinct pieces; merges never cross pieces or documents.
  std::unordered_map<std::string, int64_t> piece_counts;
  rep.corpus = for_each_document(corpus, [&](std::string_view doc, const DocumentOrigin& o) {
    size_t bad = find_invalid_utf8(doc);
    if (bad != std::string_view::npos) {
      throw InputError(*o.file + ": document starting at line " + std::to_string(o.line) +
                       " is not valid UTF-8 at byte " + std::to_string(bad) +
                       " of the document; convert the file to UTF-8");
    }
    split_gpt2_pieces(doc, [&](std::string_view piece) {
      ++piece_counts[std::string(piece)];
      ++rep.pieces;
    });
  });
  if (rep.corpus.documents == 0) {
    throw InputError("the training input holds no non-empty documents");
  }

  // Sorted so that word indices, and with them every later step, do not depend on hashing.
  std::vector<std::pair<std::string, int64_t>> sorted(piece_counts.begin(), piece_counts.end());
  piece_counts.clear();
  std::sort(sorted.begin(), sorted.end());
  rep.unique_pieces = sorted.size();

  std::vector<Word> words;
  words.reserve(sorted.size());
  for (auto& [piece, count] : sorted) {
    Word w{{}, count};
    w.symbols.reserve(piece.size());
    for (char c : piece) w.symbols.push_back(static_cast<uint8_t>(c));
    words.push_back(std::move(w));
  }
  sorted.clear();

  // 2. Pair statistics and an index from each pair to the words that hold it.
  std::unordered_map<PairKey, int64_t> pair_counts;
  std::unordered_map<PairKey, std::vector<uint32_t>> pair_words;
  for (uint32_t wi = 0; wi < words.size(); ++wi) {
    const auto& s = words[wi].symbols;
    for (size_t i = 0; i + 1 < s.size(); ++i) {
      PairKey k = pair_key(s[i], s[i + 1]);
      pair_counts[k] += words[wi].count;
      auto& list = pair_words[k];
      if (list.empty() || list.back() != wi) list.push_back(wi);
    }
  }
  std::priority_queue<HeapEntry> heap;
  for (const auto& [k, c] : pair_counts) heap.push({c, k});

  std::vector<std::string> token_bytes;
  for (int b = 0; b < 256; ++b) token_bytes.emplace_back(1, static_cast<char>(b));
  std::unordered_map<std::string, uint32_t> existing;
  for (uint32_t b = 0; b < 256; ++b) existing[token_bytes[b]] = b;
  std::vector<std::pair<uint32_t, uint32_t>> merges;
  const uint32_t target_merges = options.vocab_size - smallest;

  // 3. Merge the most frequent pair until the vocabulary is full. Counts only ever fall for
  // pairs already in the heap, so a stale entry is re-queued with its current count.
  std::unordered_map<PairKey, int64_t> delta;
  std::vector<uint32_t> merged_word;
  while (merges.size() < target_merges) {
    if (heap.empty()) {
      rep.ran_out_of_pairs = true;
      break;
    }
    HeapEntry top = heap.top();
    heap.pop();
    auto it = pair_counts.find(top.pair);
    int64_t current = it == pair_counts.end() ? 0 : it->second;
    if (current != top.count) {
      if (current > 0) heap.push({current, top.pair});
      continue;
    }
    const uint32_t l = pair_left(top.pair), r = pair_right(top.pair);
    std::string bytes = token_bytes[l] + token_bytes[r];
    uint32_t z;
    auto found = existing.find(bytes);
    if (found != existing.end()) {
      // Another split of the same string is already a token; merging into it keeps every
      // token's bytes unique, which tiktoken-style encoding requires.
      z = found->second;
    } else {
      z = static_cast<uint32_t>(token_bytes.size());
      token_bytes.push_back(bytes);
      existing.emplace(std::move(bytes), z);
      merges.emplace_back(l, r);
    }

    std::vector<uint32_t> affected = std::move(pair_words[top.pair]);
    pair_words.erase(top.pair);
    delta.clear();
    for (uint32_t wi : affected) {
      Word& w = words[wi];
      const auto& s = w.symbols;
      merged_word.clear();
      bool changed = false;
      for (size_t i = 0; i < s.size(); ++i) {
        if (i + 1 < s.size() && s[i] == l && s[i + 1] == r) {
          merged_word.push_back(z);
          ++i;
          changed = true;
        } else {
          merged_word.push_back(s[i]);
        }
      }
      if (!changed) continue;
      for (size_t i = 0; i + 1 < s.size(); ++i) delta[pair_key(s[i], s[i + 1])] -= w.count;
      for (size_t i = 0; i + 1 < merged_word.size(); ++i) {
        PairKey k = pair_key(merged_word[i], merged_word[i + 1]);
        delta[k] += w.count;
        if (merged_word[i] == z || merged_word[i + 1] == z) {
          auto& list = pair_words[k];
          if (list.empty() || list.back() != wi) list.push_back(wi);
        }
      }
      w.symbols.swap(merged_word);
    }
    // Apply in sorted order so heap insertion order (and thus tie handling) is fixed.
    std::vector<std::pair<PairKey, int64_t>> changes(delta.begin(), delta.end());
    std::sort(changes.begin(), changes.end());
    for (const auto& [k, d] : changes) {
      if (d == 0) continue;
      int64_t& c = pair_counts[k];
      c += d;
      if (c <= 0) {
        pair_counts.erase(k);
      } else if (d > 0) {
        heap.push({c, k});
      }
    }
  }
  rep.merges = static_cast<uint32_t>(merges.size());
  if (report != nullptr) *report = rep;
  return BpeTokenizer::from_merges(merges, specials);
}

}  // namespace nanogpt
