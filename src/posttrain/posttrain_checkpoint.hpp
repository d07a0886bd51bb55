// What a post-training run (sft, dpo, rl) keeps in its checkpoints and needs of the one it starts
// from. Its checkpoints are ordinary ones (runtime/checkpoint.hpp: model.safetensors with the
// configuration, optimizer.safetensors, meta.json with the tokenizer), so `sample`, `eval`,
// `evals run`, `chat` and the next stage read them like any other; the stage's own position
// (stage, step, seed, anything else it needs to resume exactly) is the optimizer file's
// "posttrain_state" metadata.
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include "config/config.hpp"
#include "data/bpe_tokenizer.hpp"
#include "data/chat_format.hpp"
#include "model/gpt.hpp"
#include "optim/gpt_optimizer.hpp"

namespace nanogpt {

struct PosttrainState {
  std::string stage;  // "sft", "dpo", "rl"
  int64_t step = 0;   // steps done
  uint64_t seed = 0;
  nlohmann::json extra = nlohmann::json::object();  // the stage's own (e.g. RL's baseline)
};

// Writes RUN_DIR/checkpoints/step_NNNNNN (whole or not at all) and returns it. `files`: the
// stage's own further files (name → contents, e.g. RL's value_head.safetensors), written with it.
// A collective over the optimizer's ranks (its state is gathered); rank 0 writes, and every
// rank returns the path once it is written.
std::string save_posttrain_state(const std::string& run_dir, const PosttrainState& state,
                                 const Gpt& model, GptOptimizer& optimizer, double loss,
                                 const nlohmann::json& tokenizer_record,
                                 std::map<std::string, std::string> files = {});

// The state of a checkpoint this stage wrote, its optimizer state imported (the caller loads the
// weights with load_model_weights). InputError if another stage (or pre-training) wrote it.
PosttrainState load_posttrain_state(const std::string& checkpoint, const std::string& stage,
                                    GptOptimizer& optimizer);

// Carries Muon's momentum and Adam's moments (and step count) over from the checkpoint a
// stage starts from, when it has them (pre-training's and every stage's checkpoints do).
// Returns whether it did; a checkpoint without optimizer.safetensors starts the optimizer fresh.
bool import_pretraining_optimizer_state(const std::string& checkpoint, GptOptimizer& optimizer);

// What every stage resolves before it trains: the tokenizer and its chat tokens, the checkpoint
// it starts from (the run's newest on --resume, named in errors as `stage --resume`), that
// checkpoint's configuration (checked against the tokenizer), and the attention window
// (window_blocks, or what pre-training ended with when 0).
struct PosttrainStart {
  BpeTokenizer tokenizer;
  ChatTokens chat;
  std::string checkpoint;
  Config config;
  int64_t window_blocks = 0;
};
PosttrainStart resolve_posttrain_start(const std::string& stage, const std::string& checkpoint,
                                       const std::string& run_dir, bool resume,
                                       const std::string& tokenizer_spec, int64_t window_blocks);

// RUN_DIR/run.json of a stage: `fields` (the stage's own options), then what every stage
// records: the checkpoint it started from, the window, the tokenizer, the model's
// configuration, the revision, the CPU and the command.
void write_posttrain_run_record(const std::string& run_dir, const std::string& stage,
                                nlohmann::ordered_json fields, const PosttrainStart& start,
                                const nlohmann::json& tokenizer_record,
                                const std::string& command_line);

// The order a stage visits its n items in epoch `epoch`: a permutation by (seed, epoch, salt)
// (Fisher–Yates on Rng), the same on every machine.
std::vector<int64_t> epoch_order(int64_t n, uint64_t seed, int64_t epoch, uint64_t salt);

// The model must have the tokenizer's vocabulary (ids and size) and so its chat tokens:
// InputError naming both sizes and the fix otherwise.
void check_chat_vocabulary(const Config& config, const BpeTokenizer& tokenizer,
                           const ChatTokens& chat, const std::string& tokenizer_spec);

}  // namespace nanogpt
