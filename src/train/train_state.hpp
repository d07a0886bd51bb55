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

namespace nanogpt {

// Writes RUN_DIR/checkpoints/step_NNNNNN (complete or not at all) after `step` steps; returns
// its path. val_loss NaN: not evaluated at this step. Data-parallel, every rank calls it (the
// optimizer's state is gathered from all) and rank 0 alone writes.
std::string save_train_state(const std::string& run_dir, int64_t step, const Gpt& model,
                             GptOptimizer& optimizer, const TokenLoader& loader, double train_loss,
                             double val_loss, const nlohmann::json& tokenizer);

// Restores model, optimizer and loader from `checkpoint` and returns its step. An InputError
// if the checkpoint was written under another configuration than the model's.
int64_t load_train_state(const std::string& checkpoint, Gpt& model, GptOptimizer& optimizer,
                         TokenLoader& loader);

// The validation loss recorded with a checkpoint; NaN if none was.
double checkpoint_val_loss(const std::string& checkpoint);

}  // namespace nanogpt
