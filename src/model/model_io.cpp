#include "model/model_io.hpp"

#include <cstring>

#include "runtime/error.hpp"
#include "runtime/safetensors.hpp"

namespace nanogpt {

std::vector<CheckpointTensor> model_tensors(const Gpt& model) {
  std::vector<CheckpointTensor> out;
  for (const ParamTensor& t : model.params().tensors()) {
    out.push_back({t.name, t.shape, model.params().values().data() + t.offset});
  }
  return out;
}

Config read_checkpoint_config(const std::string& checkpoint_dir) {
  const std::string path = checkpoint_dir + "/model.safetensors";
  SafetensorsReader r(path);
  if (r.metadata().count("config") == 0) {
    throw InputError("'" + path +
                     "' has no \"config\" in its metadata; it was not written by nanogpt train");
  }
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(r.metadata_value("config"));
  } catch (const nlohmann::json::exception& e) {
    throw InputError("'" + path + "': metadata \"config\" is not valid JSON: " + e.what());
  }
  return config_from_json(j, preset("speedrun"));
}

void load_model_weights(Gpt& model, const std::string& checkpoint_dir) {
  const std::string path = checkpoint_dir + "/model.safetensors";
  SafetensorsReader r(path);
  for (const ParamTensor& t : model.params().tensors()) {
    if (!r.contains(t.name)) {
      throw InputError("checkpoint '" + path + "' lacks tensor '" + t.name +
                       "' that the configuration needs; the checkpoint is for a different model");
    }
    std::vector<float> v = r.read_f32(t.name, t.shape);  // names both shapes on mismatch
    std::memcpy(model.params().values().data() + t.offset, v.data(), v.size() * sizeof(float));
  }
  for (const std::string& name : r.names()) {
    if (!model.params().contains(name)) {
      throw InputError(
          "checkpoint '" + path + "' has tensor '" + name +
          "' that the configuration does not have; the checkpoint is for a different model");
    }
  }
}

std::unique_ptr<Gpt> load_model(const std::string& checkpoint_dir) {
  auto model = std::make_unique<Gpt>(read_checkpoint_config(checkpoint_dir));
  load_model_weights(*model, checkpoint_dir);
  return model;
}

std::string require_checkpoint(const std::string& path) {
  std::string dir = find_latest_checkpoint(path);
  if (dir.empty()) {
    throw InputError("no complete checkpoint at '" + path +
                     "' (give a run directory or one of its checkpoints/step_* directories)");
  }
  return dir;
}

}  // namespace nanogpt
