// `nanogpt bench ...`: measurements that print JSON, compared against peers by scripts in
// bench/. Never pass/fail: the machines are shared and noisy.
#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "cli/commands.hpp"
#include "data/bpe_tokenizer.hpp"
#include "runtime/file_io.hpp"

namespace nanogpt::cli {

namespace {

uint64_t fnv1a64_of_ids(const std::vector<uint32_t>& ids) {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (uint32_t id : ids) {
    for (int k = 0; k < 4; ++k) {
      h ^= (id >> (8 * k)) & 0xFF;
      h *= 0x100000001b3ULL;
    }
  }
  return h;
}

void register_bench_encode(CLI::App& bench) {
  auto* cmd = bench.add_subcommand("encode", "Single-thread encode throughput on a text file");
  auto tokenizer = std::make_shared<std::string>();
  auto input = std::make_shared<std::string>();
  auto repeats = std::make_shared<int>(5);
  cmd->add_option("--tokenizer", *tokenizer, "Tokenizer JSON file, or gpt2:DIR")->required();
  cmd->add_option("--input", *input, "UTF-8 text file to encode (as one ordinary text)")
      ->required()
      ->check(CLI::ExistingFile);
  cmd->add_option("--repeats", *repeats,
                  "Timed repetitions after one warm-up; the best is reported")
      ->capture_default_str()
      ->check(CLI::Range(1, 1000));
  cmd->callback([tokenizer, input, repeats] {
    BpeTokenizer tok = BpeTokenizer::load(*tokenizer);
    std::string text = read_file(*input);
    std::vector<uint32_t> ids = tok.encode(text, false);  // warm-up, and the ids to hash
    double best = 1e30;
    for (int r = 0; r < *repeats; ++r) {
      auto t0 = std::chrono::steady_clock::now();
      std::vector<uint32_t> again = tok.encode(text, false);
      double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      best = std::min(best, s);
      if (again.size() != ids.size()) throw std::runtime_error("encode is not deterministic");
    }
    char hash[17];
    std::snprintf(hash, sizeof hash, "%016llx",
                  static_cast<unsigned long long>(fnv1a64_of_ids(ids)));
    nlohmann::ordered_json j;
    j["bytes"] = text.size();
    j["tokens"] = ids.size();
    j["best_s"] = best;
    j["mb_per_s"] = text.size() / 1e6 / best;
    j["threads"] = 1;
    j["ids_fnv1a64"] = hash;
    std::printf("%s\n", j.dump().c_str());
  });
}

}  // namespace

void register_bench(CLI::App& app) {
  auto* bench = app.add_subcommand("bench", "Benchmarks that print one JSON line each");
  bench->require_subcommand(1);
  register_bench_encode(*bench);
}

}  // namespace nanogpt::cli
