#include "posttrain/posttrain_checkpoint.hpp"

#include <filesystem>

#include "model/model_io.hpp"
#include "runtime/build_info.hpp"
#include "runtime/checkpoint.hpp"
#include "runtime/error.hpp"
#include "runtime/file_io.hpp"
#include "runtime/safetensors.hpp"

namespace nanogpt {

namespace {

void import_state(SafetensorsReader& opt, GptOptimizer& optimizer) {
  std::vector<GptOptimizer::StateTensor> layout = optimizer.state_layout();
  for (auto& st : layout) st.data = opt.read_f32(st.name, st.shape);
  optimizer.import_state(layout);
}

}  // namespace

std::string save_posttrain_state(const std::string& run_dir, const PosttrainState& state,
                                 const Gpt& model, GptOptimizer& optimizer, double loss,
                                 const nlohmann::json& tokenizer_record) {
  CheckpointContents cc;
  cc.model = model_tensors(model);
  cc.model_metadata["format"] = "pt";
  cc.model_metadata["config"] = config_to_json(model.config()).dump();
  cc.model_metadata["step"] = std::to_string(state.step);
  const std::vector<GptOptimizer::StateTensor> opt_state = optimizer.export_state();
  for (const auto& st : opt_state) cc.optimizer.push_back({st.name, st.shape, st.data.data()});
  cc.optimizer_metadata["posttrain_state"] = nlohmann::json{
      {"stage", state.stage},
      {"step", state.step},
      {"seed", state.seed},
      {"adam_steps", optimizer.adam_steps()},
      {"extra", state.extra}}.dump();
  cc.meta = {{"step", state.step},
             {"stage", state.stage},
             {"train_loss", std::isfinite(loss) ? nlohmann::json(loss) : nlohmann::json(nullptr)},
             {"val_loss", nullptr},
             {"tokenizer", tokenizer_record},
             {"revision", build_revision()}};
  return save_checkpoint(run_dir, state.step, cc);
}

PosttrainState load_posttrain_state(const std::string& checkpoint, const std::string& stage,
                                    GptOptimizer& optimizer) {
  SafetensorsReader opt(checkpoint + "/optimizer.safetensors");
  if (opt.metadata().count("posttrain_state") == 0) {
    throw InputError("--resume: '" + checkpoint + "' was not written by `nanogpt " + stage +
                     "` (no post-training state); start a new run from it instead");
  }
  const auto j = nlohmann::json::parse(opt.metadata_value("posttrain_state"));
  PosttrainState s;
  s.stage = j.at("stage").get<std::string>();
  if (s.stage != stage) {
    throw InputError("--resume: '" + checkpoint + "' was written by `nanogpt " + s.stage +
                     "`, not `nanogpt " + stage + "`");
  }
  s.step = j.at("step").get<int64_t>();
  s.seed = j.at("seed").get<uint64_t>();
  s.extra = j.at("extra");
  import_state(opt, optimizer);
  optimizer.set_adam_steps(j.at("adam_steps").get<int64_t>());
  return s;
}

bool import_pretraining_optimizer_state(const std::string& checkpoint, GptOptimizer& optimizer) {
  const std::string path = checkpoint + "/optimizer.safetensors";
  if (!std::filesystem::exists(path)) return false;
  SafetensorsReader opt(path);
  // A checkpoint written without optimizer state (an imported model) starts the optimizer
  // fresh; one with part of it was written for another model and is refused by import_state.
  const std::vector<GptOptimizer::StateTensor> layout = optimizer.state_layout();
  bool any = false;
  for (const auto& st : layout) any = any || opt.contains(st.name);
  if (!any) return false;
  import_state(opt, optimizer);
  const auto& md = opt.metadata();
  int64_t adam_steps = 0;
  if (md.count("train_state") != 0) {
    adam_steps = nlohmann::json::parse(md.at("train_state")).at("adam_steps").get<int64_t>();
  } else if (md.count("posttrain_state") != 0) {
    adam_steps = nlohmann::json::parse(md.at("posttrain_state")).at("adam_steps").get<int64_t>();
  }
  optimizer.set_adam_steps(adam_steps);
  return true;
}

void check_chat_vocabulary(const Config& config, const BpeTokenizer& tokenizer,
                           const ChatTokens& chat, const std::string& tokenizer_spec) {
  if (config.vocab_size != static_cast<int64_t>(tokenizer.vocab_size())) {
    throw InputError("the checkpoint's model has a vocabulary of " +
                     std::to_string(config.vocab_size) + " tokens, the tokenizer '" +
                     tokenizer_spec + "' has " + std::to_string(tokenizer.vocab_size()) +
                     ": post-train a model pre-trained with this tokenizer (or pass the one it "
                     "was trained with, --tokenizer)");
  }
  for (uint32_t id :
       {chat.bos, chat.user_start, chat.user_end, chat.assistant_start, chat.assistant_end}) {
    if (static_cast<int64_t>(id) >= config.vocab_size) {
      throw InputError("the chat token id " + std::to_string(id) +
                       " is outside the model's vocabulary (" + std::to_string(config.vocab_size) +
                       ")");
    }
  }
  if (static_cast<int64_t>(chat.bos) != config.eot_id) {
    throw InputError("the model's <|endoftext|> is id " + std::to_string(config.eot_id) +
                     ", the tokenizer's " + std::to_string(chat.bos) +
                     ": pass the tokenizer the model was pre-trained with");
  }
}

}  // namespace nanogpt
