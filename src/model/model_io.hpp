// Moving a model between memory and checkpoint files: the weights under the seed's PyTorch
// names (loadable by any safetensors user into the seed's model) and the configuration in the
// file's metadata.
#pragma once

#include <memory>
#include <string>

#include "model/gpt.hpp"
#include "runtime/checkpoint.hpp"

namespace nanogpt {

// The model's weights as checkpoint tensors (borrowing the model's storage).
std::vector<CheckpointTensor> model_tensors(const Gpt& model);
// Reads the configuration stored in a checkpoint's model.safetensors.
Config read_checkpoint_config(const std::string& checkpoint_dir);
// Copies weights from model.safetensors into `model`, refusing any missing, extra or
// mis-shaped tensor with the mismatch named.
void load_model_weights(Gpt& model, const std::string& checkpoint_dir);
// A model built from the checkpoint's own configuration and weights.
std::unique_ptr<Gpt> load_model(const std::string& checkpoint_dir);
// The newest complete checkpoint at `path` (a checkpoint or a run directory); an error naming
// the path if there is none.
std::string require_checkpoint(const std::string& path);

}  // namespace nanogpt
