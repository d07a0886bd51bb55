#include "data/bpe_tokenizer.hpp"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <queue>

#include "data/gpt2_pretokenizer.hpp"
#include "data/utf8.hpp"
#include "runtime/error.hpp"
#include "runtime/file_io.hpp"
#include "runtime/sha256.hpp"

namespace nanogpt {

namespace {

// Pieces up to this many bytes merge with the simple quadratic scan (cheaper for the short
// pieces of real text); longer ones use a heap so adversarial input stays O(n log n).
constexpr size_t kQuadraticMergeLimit = 128;

}  // namespace

void BpeTokenizer::finish_building() {
  // Every byte must be a token so any text can be encoded.
  for (int b = 0; b < 256; ++b) byte_ids_[b] = kNoToken;
  ids_.build(tokens_, ordinary_count_);
  for (int b = 0; b < 256; ++b) {
    char c = static_cast<char>(b);
    byte_ids_[b] = ids_.find(std::string_view(&c, 1));
    if (byte_ids_[b] == kNoToken) {
      throw InputError("tokenizer '" + spec_ + "' has no token for byte " + std::to_string(b) +
                       "; a byte-level BPE vocabulary must contain all 256 single bytes");
    }
  }
  // tiktoken merges any adjacent pair whose concatenation is a token, so list every split of
  // every token into two tokens.
  size_t candidate_pairs = 0;
  for (uint32_t id = 0; id < ordinary_count_; ++id) candidate_pairs += tokens_[id].size();
  pairs_.reserve(candidate_pairs);
  for (uint32_t id = 0; id < ordinary_count_; ++id) {
    std::string_view t = tokens_[id];
    for (size_t k = 1; k < t.size(); ++k) {
      uint32_t left = ids_.find(t.substr(0, k));
      if (left == kNoToken) continue;
      uint32_t right = ids_.find(t.substr(k));
      if (right == kNoToken) continue;
      pairs_.insert(left, right, id);
    }
  }
}

BpeTokenizer BpeTokenizer::load(const std::string& spec) {
  if (spec.rfind("gpt2:", 0) == 0) return from_gpt2_files(spec.substr(5));
  return from_json_file(spec);
}

BpeTokenizer BpeTokenizer::from_merges(const std::vector<std::pair<uint32_t, uint32_t>>& merges,
                                       const std::vector<std::string>& specials) {
  BpeTokenizer tok;
  tok.tokens_.reserve(256 + merges.size() + specials.size());
  for (int b = 0; b < 256; ++b) tok.tokens_.emplace_back(1, static_cast<char>(b));
  for (size_t i = 0; i < merges.size(); ++i) {
    auto [l, r] = merges[i];
    uint32_t next = static_cast<uint32_t>(tok.tokens_.size());
    if (l >= next || r >= next) {
      throw InputError("merge " + std::to_string(i) + " (" + std::to_string(l) + ", " +
                       std::to_string(r) + ") refers to a token that does not exist yet (id " +
                       std::to_string(next) + " is being defined)");
    }
    tok.tokens_.push_back(tok.tokens_[l] + tok.tokens_[r]);
  }
  tok.merges_ = merges;
  tok.ordinary_count_ = static_cast<uint32_t>(tok.tokens_.size());
  {
    // Unique byte strings are what make "rank = id" well defined.
    std::vector<std::string_view> sorted(tok.tokens_.begin(), tok.tokens_.end());
    std::sort(sorted.begin(), sorted.end());
    auto dup = std::adjacent_find(sorted.begin(), sorted.end());
    if (dup != sorted.end()) {
      throw InputError("tokenizer merges produce the same byte string twice ('" +
                       std::string(*dup) + "'); every token must be unique");
    }
  }
  for (const std::string& s : specials) {
    tok.specials_.push_back({s, static_cast<uint32_t>(tok.tokens_.size())});
    tok.tokens_.push_back(s);
  }
  tok.spec_ = "merges";
  tok.finish_building();
  return tok;
}

BpeTokenizer BpeTokenizer::from_json_file(const std::string& path) {
  std::string text = read_file(path);
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw InputError("tokenizer file '" + path + "' is not valid JSON: " + e.what() +
                     ". Write one with `nanogpt tokenizer train`, or use gpt2:DIR for "
                     "OpenAI's GPT-2 files");
  }
  auto fail = [&](const std::string& why) {
    return InputError("tokenizer file '" + path + "': " + why);
  };
  if (!j.is_object() || j.value("format", "") != "nanogpt-bpe") {
    throw fail("missing \"format\": \"nanogpt-bpe\"; not a tokenizer written by nanogpt");
  }
  if (j.value("version", 0) != 1) throw fail("unsupported version (this build reads version 1)");
  if (j.value("pretokenizer", "") != "gpt2") throw fail("unsupported pretokenizer (need gpt2)");
  std::vector<std::pair<uint32_t, uint32_t>> merges;
  std::vector<std::string> specials;
  try {
    for (const auto& m : j.at("merges")) {
      merges.emplace_back(m.at(0).get<uint32_t>(), m.at(1).get<uint32_t>());
    }
    std::vector<std::pair<uint32_t, std::string>> sp;
    for (const auto& [name, id] : j.at("special_tokens").items()) {
      sp.emplace_back(id.get<uint32_t>(), name);
    }
    std::sort(sp.begin(), sp.end());
    for (size_t i = 0; i < sp.size(); ++i) {
      if (sp[i].first != 256 + merges.size() + i) {
        throw fail("special token '" + sp[i].second + "' has id " + std::to_string(sp[i].first) +
                   ", expected " + std::to_string(256 + merges.size() + i) +
                   " (specials follow the merges)");
      }
      specials.push_back(sp[i].second);
    }
  } catch (const nlohmann::json::exception& e) {
    throw fail(std::string("malformed merges or special_tokens: ") + e.what());
  }
  BpeTokenizer tok;
  try {
    tok = from_merges(merges, specials);
  } catch (const InputError& e) {
    throw fail(e.what());
  }
  if (j.contains("vocab_size") && j["vocab_size"] != tok.vocab_size()) {
    throw fail("vocab_size says " + j["vocab_size"].dump() + " but merges and specials define " +
               std::to_string(tok.vocab_size()));
  }
  tok.spec_ = path;
  tok.sha256_ = sha256_hex(text);
  return tok;
}

std::string BpeTokenizer::to_json() const {
  // Hand-formatted: one merge per line keeps the file diffable, and the byte-identical output
  // for identical input is part of the contract.
  nlohmann::json sp = nlohmann::json::object();
  for (const auto& s : specials_) sp[s.text] = s.id;
  std::string out = "{\n  \"format\": \"nanogpt-bpe\",\n  \"version\": 1,\n";
  out += "  \"pretokenizer\": \"gpt2\",\n";
  out += "  \"vocab_size\": " + std::to_string(vocab_size()) + ",\n";
  out += "  \"special_tokens\": " + sp.dump() + ",\n";
  out += "  \"merges\": [";
  for (size_t i = 0; i < merges_.size(); ++i) {
    out += i == 0 ? "\n    [" : ",\n    [";
    out += std::to_string(merges_[i].first) + ", " + std::to_string(merges_[i].second) + "]";
  }
  out += merges_.empty() ? "]\n}\n" : "\n  ]\n}\n";
  return out;
}

std::optional<uint32_t> BpeTokenizer::find_special(std::string_view text) const {
  for (const auto& s : specials_) {
    if (s.text == text) return s.id;
  }
  return std::nullopt;
}

uint32_t BpeTokenizer::eot_id() const {
  if (auto id = find_special(kEndOfText)) return *id;
  throw InputError("tokenizer '" + spec_ + "' has no " + std::string(kEndOfText) + " token");
}

void BpeTokenizer::merge_piece_quadratic(std::string_view piece, std::vector<uint32_t>& out) const {
  uint32_t sym[kQuadraticMergeLimit];
  uint32_t merged[kQuadraticMergeLimit];  // merged[i]: id of sym[i]+sym[i+1], or kNoToken
  size_t n = piece.size();
  for (size_t i = 0; i < n; ++i) sym[i] = byte_ids_[static_cast<uint8_t>(piece[i])];
  for (size_t i = 0; i + 1 < n; ++i) merged[i] = pairs_.find(sym[i], sym[i + 1]);
  while (n > 1) {
    size_t best = 0;
    uint32_t best_id = kNoToken;
    for (size_t i = 0; i + 1 < n; ++i) {
      if (merged[i] < best_id) {
        best_id = merged[i];
        best = i;
      }
    }
    if (best_id == kNoToken) break;
    sym[best] = best_id;
    for (size_t i = best + 1; i + 1 < n; ++i) sym[i] = sym[i + 1];
    for (size_t i = best + 1; i + 2 < n; ++i) merged[i] = merged[i + 1];
    --n;
    if (best > 0) merged[best - 1] = pairs_.find(sym[best - 1], sym[best]);
    if (best + 1 < n) merged[best] = pairs_.find(sym[best], sym[best + 1]);
  }
  out.insert(out.end(), sym, sym + n);
}

void BpeTokenizer::merge_piece_heap(std::string_view piece, std::vector<uint32_t>& out) const {
  const size_t n = piece.size();
  constexpr uint32_t kNone = 0xFFFFFFFFu;
  std::vector<uint32_t> sym(n), next(n), prev(n), version(n, 0);
  for (size_t i = 0; i < n; ++i) {
    sym[i] = byte_ids_[static_cast<uint8_t>(piece[i])];
    next[i] = i + 1 < n ? static_cast<uint32_t>(i + 1) : kNone;
    prev[i] = i > 0 ? static_cast<uint32_t>(i - 1) : kNone;
  }
  struct Candidate {
    uint32_t merged, pos, version;
    bool operator>(const Candidate& o) const {
      return merged != o.merged ? merged > o.merged : pos > o.pos;
    }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> heap;
  auto push = [&](uint32_t pos) {
    if (pos == kNone || next[pos] == kNone) return;
    uint32_t m = pairs_.find(sym[pos], sym[next[pos]]);
    if (m != kNoToken) heap.push({m, pos, version[pos]});
  };
  for (size_t i = 0; i + 1 < n; ++i) push(static_cast<uint32_t>(i));
  while (!heap.empty()) {
    Candidate c = heap.top();
    heap.pop();
    // A candidate is stale once either symbol of its pair changed; the left symbol's version
    // changes whenever it or its right neighbour does.
    if (c.version != version[c.pos]) continue;
    uint32_t right = next[c.pos];
    sym[c.pos] = c.merged;
    next[c.pos] = next[right];
    if (next[right] != kNone) prev[next[right]] = c.pos;
    sym[right] = kNone;
    ++version[c.pos];
    ++version[right];
    if (prev[c.pos] != kNone) {
      ++version[prev[c.pos]];
      push(prev[c.pos]);
    }
    push(c.pos);
  }
  for (uint32_t i = 0; i != kNone; i = next[i]) out.push_back(sym[i]);
}

void BpeTokenizer::encode_piece(std::string_view piece, std::vector<uint32_t>& out) const {
  uint32_t whole = ids_.find(piece);
  if (whole != kNoToken) {
    out.push_back(whole);
  } else if (piece.size() <= kQuadraticMergeLimit) {
    merge_piece_quadratic(piece, out);
  } else {
    merge_piece_heap(piece, out);
  }
}

void BpeTokenizer::encode_ordinary(std::string_view text, std::vector<uint32_t>& out) const {
  split_gpt2_pieces(text, [&](std::string_view piece) { encode_piece(piece, out); });
}

void BpeTokenizer::encode_append(std::string_view text, bool allow_special,
                                 std::vector<uint32_t>& out) const {
  size_t bad = find_invalid_utf8(text);
  if (bad != std::string_view::npos) {
    throw InputError("input is not valid UTF-8 at byte offset " + std::to_string(bad) +
                     " (byte 0x" +
                     [&] {
                       char h[3];
                       snprintf(h, sizeof h, "%02x", static_cast<uint8_t>(text[bad]));
                       return std::string(h);
                     }() +
                     "); convert the text to UTF-8 (e.g. iconv -f latin1 -t utf-8)");
  }
  if (!allow_special || specials_.empty()) {
    encode_ordinary(text, out);
    return;
  }
  size_t pos = 0;
  while (pos < text.size()) {
    size_t best = std::string_view::npos;
    const SpecialToken* which = nullptr;
    for (const auto& s : specials_) {
      size_t at = text.find(s.text, pos);
      if (at < best) {
        best = at;
        which = &s;
      }
    }
    if (which == nullptr) break;
    encode_ordinary(text.substr(pos, best - pos), out);
    out.push_back(which->id);
    pos = best + which->text.size();
  }
  if (pos < text.size()) encode_ordinary(text.substr(pos), out);
}

std::vector<uint32_t> BpeTokenizer::encode(std::string_view text, bool allow_special) const {
  std::vector<uint32_t> out;
  out.reserve(text.size() / 3 + 8);
  encode_append(text, allow_special, out);
  return out;
}

std::string BpeTokenizer::decode(std::span<const uint32_t> ids) const {
  std::string out;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] >= tokens_.size()) {
      throw InputError("token id " + std::to_string(ids[i]) + " at position " + std::to_string(i) +
                       " is outside the vocabulary (size " + std::to_string(tokens_.size()) + ")");
    }
    out += tokens_[ids[i]];
  }
  return out;
}

}  // namespace nanogpt
