// Checkpoint directories: RUNDIR/checkpoints/step_NNNNNN/ holding model.safetensors (F32
// weights under the seed's PyTorch names, config in __metadata__), optimizer.safetensors
// (optimizer state; step, data position and RNG in its metadata) and meta.json. The directory
// is assembled under a temporary name and renamed into place, so a step_* directory is always
// complete.
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace nanogpt {

struct CheckpointTensor {
  std::string name;
  std::vector<int64_t> shape;
  const float* data;
};

struct CheckpointContents {
  std::vector<CheckpointTensor> model;
  std::map<std::string, std::string> model_metadata;
  std::vector<CheckpointTensor> optimizer;
  std::map<std::string, std::string> optimizer_metadata;
  nlohmann::json meta;
  // Further files of the directory (a stage's own state, e.g. RL's value head): name → contents,
  // written with the rest, so the directory is complete with them or not there at all.
  std::map<std::string, std::string> files;
};

std::string checkpoint_dir_name(int64_t step);
// Returns the directory written.
std::string save_checkpoint(const std::string& run_dir, int64_t step,
                            const CheckpointContents& contents);
// The newest complete checkpoint under RUNDIR/checkpoints ("" if none). Also accepts a path
// that is itself a checkpoint directory.
std::string find_latest_checkpoint(const std::string& run_dir);

}  // namespace nanogpt
