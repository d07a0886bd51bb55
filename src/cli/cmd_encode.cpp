// `nanogpt encode` / `nanogpt decode`: text <-> token ids on stdin/stdout.
#include <cstdio>
#include <iostream>
#include <iterator>

#include "cli/commands.hpp"
#include "data/bpe_tokenizer.hpp"
#include "runtime/error.hpp"

namespace nanogpt::cli {

namespace {

std::string read_stdin() {
  return std::string(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
}

// Accepts ids separated by whitespace and/or commas, optionally inside [ ].
std::vector<uint32_t> parse_ids(const std::string& text) {
  std::vector<uint32_t> ids;
  size_t i = 0;
  while (i < text.size()) {
    char c = text[i];
    if (c == ' ' || c == '\n' || c == '\t' || c == '\r' || c == ',' || c == '[' || c == ']') {
      ++i;
      continue;
    }
    if (c < '0' || c > '9') {
      throw InputError("decode input: unexpected character '" + std::string(1, c) + "' at byte " +
                       std::to_string(i) +
                       "; expected token ids separated by spaces, commas or newlines");
    }
    uint64_t v = 0;
    size_t start = i;
    while (i < text.size() && text[i] >= '0' && text[i] <= '9') {
      v = v * 10 + static_cast<uint64_t>(text[i] - '0');
      if (v > 0xFFFFFFFEull) {
        throw InputError("decode input: number at byte " + std::to_string(start) + " is too large");
      }
      ++i;
    }
    ids.push_back(static_cast<uint32_t>(v));
  }
  return ids;
}

}  // namespace

void register_encode(CLI::App& app) {
  auto* cmd = app.add_subcommand("encode", "Read text on stdin, print token ids (space-separated)");
  auto tokenizer = std::make_shared<std::string>();
  auto no_special = std::make_shared<bool>(false);
  cmd->add_option("--tokenizer", *tokenizer,
                  "Tokenizer JSON file, or gpt2:DIR for OpenAI's GPT-2 files")
      ->required();
  cmd->add_flag("--no-special", *no_special,
                "Encode <|endoftext|> as ordinary text instead of its special id");
  cmd->callback([tokenizer, no_special] {
    BpeTokenizer tok = BpeTokenizer::load(*tokenizer);
    std::vector<uint32_t> ids = tok.encode(read_stdin(), !*no_special);
    std::string out;
    out.reserve(ids.size() * 6);
    for (size_t i = 0; i < ids.size(); ++i) {
      if (i > 0) out += ' ';
      out += std::to_string(ids[i]);
    }
    out += '\n';
    std::fwrite(out.data(), 1, out.size(), stdout);
  });
}

void register_decode(CLI::App& app) {
  auto* cmd = app.add_subcommand("decode", "Read token ids on stdin, print the text");
  auto tokenizer = std::make_shared<std::string>();
  cmd->add_option("--tokenizer", *tokenizer,
                  "Tokenizer JSON file, or gpt2:DIR for OpenAI's GPT-2 files")
      ->required();
  cmd->callback([tokenizer] {
    BpeTokenizer tok = BpeTokenizer::load(*tokenizer);
    std::string text = tok.decode(parse_ids(read_stdin()));
    std::fwrite(text.data(), 1, text.size(), stdout);
  });
}

}  // namespace nanogpt::cli
