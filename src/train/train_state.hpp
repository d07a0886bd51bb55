// A training run's whole resumable state as one checkpoint (runtime/checkpoint.hpp): the
// model's weights under the seed's names with the configuration in their metadata
// (model.safetensors), the optimizer's buffers with the step, Adam's step count and the
// loader's position (optimizer.safetensors), and the step's losses and tokenizer (meta.json).
// Loading it back continues the run bitwise as if it had never stopped.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "data/token_loader.hpp"
#include "model/gpt.hpp"
#include "optim/gpt_optimizer.hpp"
#include "optim/streaming_diloco.hpp"
#include "runtime/comm.hpp"

namespace nanogpt {

// A DiLoCo run's share of a checkpoint (empty for data-parallel runs). model.safetensors and
// optimizer.safetensors hold replica 0's model and inner optimizer, so `sample` and `eval` read
// a DiLoCo checkpoint like any other; optimizer.safetensors also holds θ_global and the outer
// momentum (outer/global/NAME, outer/momentum/NAME), the outer schedule (metadata
// "outer_schedule"), and every other replica's parameters and inner optimizer state
// (replicaR/model/NAME, replicaR/STATE_NAME), gathered to rank 0.
struct OuterCheckpoint {
  StreamingDiloco* outer = nullptr;
  Comm* across = nullptr;  // the ranks with this rank's index in every replica
  int replica = 0;         // this rank's replica
  bool replica_root = false;
  bool world_root = false;  // the one rank that writes (every replica has a root of its own)
};

// Writes RUN_DIR/checkpoints/step_NNNNNN (complete or not at all) after `step` steps; returns
// its path. val_loss NaN: not evaluated at this step. Data-parallel, every rank calls it (the
// optimizer's state is gathered from all) and rank 0 alone writes.
std::string save_train_state(const std::string& run_dir, int64_t step, const Gpt& model,
                             GptOptimizer& optimizer, const TokenLoader& loader, double train_loss,
                             double val_loss, const nlohmann::json& tokenizer,
                             const OuterCheckpoint& outer = {});

// Restores model, optimizer and loader from `checkpoint` and returns its step. An InputError
// if the checkpoint was written under another configuration than the model's.
int64_t load_train_state(const std::string& checkpoint, Gpt& model, GptOptimizer& optimizer,
                         TokenLoader& loader, const OuterCheckpoint& outer = {});

// The validation loss recorded with a checkpoint; NaN if none was.
double checkpoint_val_loss(const std::string& checkpoint);

// The tokenizer a checkpoint records in meta.json ("tokenizer": {"spec", ...}); null if none.
nlohmann::json checkpoint_tokenizer_record(const std::string& checkpoint);
// The tokenizer spec to use with a checkpoint: `given` if not empty, else the one it records
// (InputError asking for --tokenizer if it records none).
std::string checkpoint_tokenizer_spec(const std::string& checkpoint, const std::string& given);

}  // namespace nanogpt
