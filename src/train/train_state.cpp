#include "train/train_state.hpp"

#include <cmath>
#include <filesystem>
#include <limits>

#include "model/model_io.hpp"
#include "runtime/build_info.hpp"
#include "runtime/checkpoint.hpp"
#include "runtime/error.hpp"
#include "runtime/file_io.hpp"
#include "runtime/profiler.hpp"
#include "runtime/safetensors.hpp"

namespace nanogpt {

std::string save_train_state(const std::string& run_dir, int64_t step, const Gpt& model,
                             GptOptimizer& optimizer, const TokenLoader& loader, double train_loss,
                             double val_loss, const nlohmann::json& tokenizer,
                             const OuterCheckpoint& outer) {
  const Config& c = model.config();
  CheckpointContents cc;
  cc.model = model_tensors(model);
  cc.model_metadata["format"] = "pt";
  cc.model_metadata["config"] = config_to_json(c).dump();
  cc.model_metadata["step"] = std::to_string(step);
  // Gathered from every rank (a collective), so the file is the same for any number of ranks.
  const std::vector<GptOptimizer::StateTensor> opt_state = optimizer.export_state();
  for (const auto& st : opt_state) cc.optimizer.push_back({st.name, st.shape, st.data.data()});
  LoaderPosition pos = loader.position();
  nlohmann::json state = {
      {"step", step},
      {"adam_steps", optimizer.adam_steps()},
      {"data_position", {{"shard", pos.shard}, {"pos", pos.pos}, {"epoch", pos.epoch}}},
      {"seed", c.seed}};
  cc.optimizer_metadata["train_state"] = state.dump();
  // DiLoCo: the outer state, and the other replicas' models and inner optimizers.
  std::vector<StreamingDiloco::StateTensor> outer_state;
  std::vector<float> replicas_flat;
  if (outer.outer != nullptr) {
    outer_state = outer.outer->export_state(model.params());  // a collective in the replica
    for (const auto& st : outer_state) cc.optimizer.push_back({st.name, st.shape, st.data.data()});
    cc.optimizer_metadata["outer_schedule"] = outer.outer->schedule_json();
    const int M = outer.across->size();
    if (M > 1 && outer.replica_root) {
      std::vector<float> mine(model.params().values().begin(), model.params().values().end());
      for (const auto& st : opt_state) mine.insert(mine.end(), st.data.begin(), st.data.end());
      replicas_flat.resize(mine.size() * static_cast<size_t>(M));
      outer.across->wait(outer.across->start_allgather(
          mine, replicas_flat,
          std::vector<int>(static_cast<size_t>(M), static_cast<int>(mine.size())),
          "replica states for the checkpoint"));
      const size_t per = mine.size();
      for (int r = 1; r < M; ++r) {
        const float* base = replicas_flat.data() + static_cast<size_t>(r) * per;
        const std::string prefix = "replica" + std::to_string(r) + "/";
        for (const ParamTensor& t : model.params().tensors()) {
          cc.optimizer.push_back({prefix + "model/" + t.name, t.shape, base + t.offset});
        }
        size_t at = model.params().size();
        for (const auto& st : opt_state) {
          cc.optimizer.push_back({prefix + st.name, st.shape, base + at});
          at += st.data.size();
        }
      }
    }
  }
  cc.meta = {
      {"step", step},
      {"train_loss", train_loss},
      {"val_loss", std::isfinite(val_loss) ? nlohmann::json(val_loss) : nlohmann::json(nullptr)},
      {"tokenizer", tokenizer},
      {"revision", build_revision()}};
  size_t bytes = model.params().size() * sizeof(float);
  for (const auto& st : opt_state) bytes += st.data.size() * sizeof(float);
  for (const auto& st : outer_state) bytes += st.data.size() * sizeof(float);
  bytes += replicas_flat.size() * sizeof(float);
  const bool writes = outer.outer != nullptr ? outer.world_root : optimizer.comm().is_root();
  if (!writes) {
    return (std::filesystem::path(run_dir) / "checkpoints" / checkpoint_dir_name(step)).string();
  }
  ProfileScope scope("checkpoint", "checkpoint.write", {step}, 0, static_cast<double>(bytes));
  return save_checkpoint(run_dir, step, cc);
}

int64_t load_train_state(const std::string& checkpoint, Gpt& model, GptOptimizer& optimizer,
                         TokenLoader& loader, const OuterCheckpoint& outer) {
  Config saved = read_checkpoint_config(checkpoint);
  if (config_to_json(saved) != config_to_json(model.config())) {
    throw InputError("--resume: the configuration differs from the checkpoint's ('" + checkpoint +
                     "'); resume with the same --config and --set values (see run.json)");
  }
  load_model_weights(model, checkpoint);
  SafetensorsReader opt(checkpoint + "/optimizer.safetensors");
  std::vector<GptOptimizer::StateTensor> opt_state = optimizer.state_layout();
  const std::string prefix = outer.outer != nullptr && outer.replica > 0
                                 ? "replica" + std::to_string(outer.replica) + "/"
                                 : "";
  if (outer.outer != nullptr) {
    if (!opt.contains("outer/global/" + model.params().tensors().front().name)) {
      throw InputError("--resume: '" + checkpoint +
                       "' was not written by a DiLoCo run (no outer state); resume it with "
                       "sync = \"ddp\"");
    }
    outer.outer->set_schedule_json(opt.metadata_value("outer_schedule"));
    std::vector<StreamingDiloco::StateTensor> outer_state =
        outer.outer->state_layout(model.params());
    for (auto& st : outer_state) st.data = opt.read_f32(st.name, st.shape);
    outer.outer->import_state(outer_state);
    if (!prefix.empty()) {
      // This replica's own parameters replace replica 0's, read above.
      for (const ParamTensor& t : model.params().tensors()) {
        const std::vector<float> v = opt.read_f32(prefix + "model/" + t.name, t.shape);
        std::copy(v.begin(), v.end(),
                  model.params().values().begin() + static_cast<std::ptrdiff_t>(t.offset));
      }
    }
  }
  for (auto& st : opt_state) st.data = opt.read_f32(prefix + st.name, st.shape);
  optimizer.import_state(opt_state);
  auto state = nlohmann::json::parse(opt.metadata_value("train_state"));
  optimizer.set_adam_steps(state.at("adam_steps").get<int64_t>());
  LoaderPosition pos;
  pos.shard = state.at("data_position").at("shard").get<uint64_t>();
  pos.pos = state.at("data_position").at("pos").get<uint64_t>();
  pos.epoch = state.at("data_position").at("epoch").get<uint64_t>();
  loader.restore(pos);
  return state.at("step").get<int64_t>();
}

double checkpoint_val_loss(const std::string& checkpoint) {
  auto meta = nlohmann::json::parse(read_file(checkpoint + "/meta.json"));
  return meta.contains("val_loss") && meta["val_loss"].is_number()
             ? meta["val_loss"].get<double>()
             : std::numeric_limits<double>::quiet_NaN();
}

nlohmann::json checkpoint_tokenizer_record(const std::string& checkpoint) {
  const std::string path = checkpoint + "/meta.json";
  if (!std::filesystem::exists(path)) return nullptr;
  const auto meta = nlohmann::json::parse(read_file(path), nullptr, false);
  if (meta.is_object() && meta.contains("tokenizer")) return meta["tokenizer"];
  return nullptr;
}

std::string checkpoint_tokenizer_spec(const std::string& checkpoint, const std::string& given) {
  if (!given.empty()) return given;
  const nlohmann::json record = checkpoint_tokenizer_record(checkpoint);
  if (!record.is_object() || !record.contains("spec") || !record["spec"].is_string()) {
    throw InputError("checkpoint '" + checkpoint +
                     "' does not record its tokenizer; pass --tokenizer");
  }
  return record["spec"].get<std::string>();
}

}  // namespace nanogpt
