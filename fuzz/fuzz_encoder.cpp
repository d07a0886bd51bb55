// libFuzzer target: encoding arbitrary bytes either refuses invalid UTF-8 with an InputError
// or round-trips exactly, and the two merge algorithms agree.
#include <cstdint>
#include <string>
#include <string_view>

#include "data/bpe_tokenizer.hpp"
#include "runtime/error.hpp"

namespace {

const nanogpt::BpeTokenizer& tokenizer() {
  // A fixed vocabulary with overlapping merges over a few letters, so that merge order,
  // ties and long pieces all matter.
  static const nanogpt::BpeTokenizer tok = [] {
    std::vector<std::pair<uint32_t, uint32_t>> merges = {
        {'a', 'a'}, {'a', 'b'}, {256, 'a'}, {257, 'b'}, {'b', 'a'}, {' ', 'a'}, {261, 'b'},
        {256, 256}, {'c', 'c'}, {264, 'c'}, {' ', ' '}, {266, ' '}, {259, 256}, {'e', 's'}};
    return nanogpt::BpeTokenizer::from_merges(merges, {std::string(nanogpt::kEndOfText)});
  }();
  return tok;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  const auto& tok = tokenizer();
  std::vector<uint32_t> ids;
  try {
    ids = tok.encode(text, size % 2 == 0);
  } catch (const nanogpt::InputError&) {
    return 0;
  }
  if (tok.decode(ids) != text) __builtin_trap();
  if (size >= 2) {
    std::vector<uint32_t> a, b;
    tok.merge_piece_quadratic(text.substr(0, std::min<size_t>(size, 128)), a);
    tok.merge_piece_heap(text.substr(0, std::min<size_t>(size, 128)), b);
    if (a != b) __builtin_trap();
  }
  return 0;
}
