// `nanogpt sample`: stream text from a checkpoint with a key/value cache.
#include <cstdio>
#include <limits>

#include "cli/commands.hpp"
#include "cli/number_range.hpp"
#include "data/bpe_tokenizer.hpp"
#include "model/decoder.hpp"
#include "model/model_io.hpp"
#include "model/sampling.hpp"
#include "runtime/checkpoint.hpp"
#include "runtime/error.hpp"
#include "runtime/file_io.hpp"
#include "runtime/random.hpp"
#include "train/attention_window.hpp"

namespace nanogpt::cli {

namespace {

std::string checkpoint_tokenizer(const std::string& dir) {
  auto meta = nlohmann::json::parse(read_file(dir + "/meta.json"));
  if (meta.contains("tokenizer") && meta["tokenizer"].is_object() &&
      meta["tokenizer"].contains("spec")) {
    return meta["tokenizer"]["spec"].get<std::string>();
  }
  throw InputError("checkpoint '" + dir + "' does not record its tokenizer; pass --tokenizer");
}

// Length of the longest prefix of s that ends on a UTF-8 character boundary.
size_t complete_utf8_prefix(const std::string& s) {
  size_t n = s.size();
  size_t i = n;
  int back = 0;
  while (i > 0 && back < 4) {
    unsigned char c = static_cast<unsigned char>(s[i - 1]);
    if ((c & 0xC0) != 0x80) {
      int need = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 1;
      return (n - (i - 1) >= static_cast<size_t>(need)) ? n : i - 1;
    }
    --i;
    ++back;
  }
  return n;
}

}  // namespace

void register_sample(CLI::App& app) {
  auto* cmd = app.add_subcommand("sample", "Generate text from a checkpoint (streams to stdout)");
  struct Args {
    std::string checkpoint, prompt, tokenizer;
    int64_t max_tokens = 200, top_k = 0, window = 0;
    double temperature = 1.0;
    int64_t seed = 0;  // int64_t: CLI11 would wrap a negative value into a uint64_t
  };
  auto a = std::make_shared<Args>();
  cmd->add_option("--checkpoint", a->checkpoint,
                  "A checkpoint directory, or a run directory (its newest checkpoint)")
      ->required();
  cmd->add_option("--prompt", a->prompt, "Text to continue")->required();
  cmd->add_option("--max-tokens", a->max_tokens, "Tokens to generate")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--temperature", a->temperature, "Softmax temperature; 0 is greedy")
      ->capture_default_str()
      ->check(finite_in_range(0.0, 100.0));
  cmd->add_option("--top-k", a->top_k, "Sample among the k most likely tokens (0: all)")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{0}, int64_t{65536}));
  cmd->add_option("--seed", a->seed, "Random seed; the same seed gives the same text")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{0}, std::numeric_limits<int64_t>::max()));
  cmd->add_option("--tokenizer", a->tokenizer,
                  "Tokenizer (default: the one recorded with the training data)");
  add_checkpoint_window_option(cmd, a->window);
  cmd->callback([a] {
    const std::string dir = require_checkpoint(a->checkpoint);
    auto model = load_model(dir);
    const Config& c = model->config();
    BpeTokenizer tok =
        BpeTokenizer::load(a->tokenizer.empty() ? checkpoint_tokenizer(dir) : a->tokenizer);
    // Training documents start with <|endoftext|>, so a prompt does too.
    std::vector<uint32_t> prompt = {static_cast<uint32_t>(c.eot_id)};
    tok.encode_append(a->prompt, false, prompt);
    const int64_t context = static_cast<int64_t>(prompt.size()) + a->max_tokens;
    const int64_t window = a->window > 0 ? a->window : attention_window_at(c, c.num_iterations);
    GptDecoder decoder(*model, context, window);
    // The prompt runs through the model in one call (every product T rows tall), then one token
    // at a time.
    const std::vector<int32_t> prompt_ids(prompt.begin(), prompt.end());
    const std::vector<float>* logits = &decoder.feed(prompt_ids);
    Rng rng(static_cast<uint64_t>(a->seed));
    std::vector<uint32_t> generated;
    std::string text = a->prompt;
    std::fwrite(text.data(), 1, text.size(), stdout);
    size_t printed = text.size();
    SamplingScratch scratch;
    SamplingSettings settings;
    settings.temperature = a->temperature;
    settings.top_k = a->top_k;
    for (int64_t n = 0; n < a->max_tokens; ++n) {
      // Only real vocabulary entries are candidates; padding classes never are.
      const int32_t next = sample_token(*logits, c.vocab_size, settings, rng, scratch);
      if (next == c.eot_id) break;  // the document ended
      generated.push_back(static_cast<uint32_t>(next));
      text = a->prompt + tok.decode(generated);
      size_t ready = complete_utf8_prefix(text);
      if (ready > printed) {
        std::fwrite(text.data() + printed, 1, ready - printed, stdout);
        std::fflush(stdout);
        printed = ready;
      }
      if (n + 1 < a->max_tokens) logits = &decoder.step(next);
    }
    if (printed < text.size()) std::fwrite(text.data() + printed, 1, text.size() - printed, stdout);
    std::fputc('\n', stdout);
  });
}

}  // namespace nanogpt::cli
