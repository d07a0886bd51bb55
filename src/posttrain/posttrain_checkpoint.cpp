#include "posttrain/posttrain_checkpoint.hpp"

#include <filesystem>
#include <utility>

#include "model/model_io.hpp"
#include "runtime/build_info.hpp"
#include "runtime/checkpoint.hpp"
#include "runtime/cpu_info.hpp"
#include "runtime/error.hpp"
#include "runtime/file_io.hpp"
#include "runtime/random.hpp"
#include "runtime/safetensors.hpp"
#include "train/attention_window.hpp"

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
                                 const nlohmann::json& tokenizer_record,
                                 std::map<std::string, std::string> files) {
  CheckpointContents cc;
  cc.files = std::move(files);
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
  // export_state gathered the optimizer's shards on every rank; rank 0 alone writes.
  Comm& comm = optimizer.comm();
  std::string path =
      (std::filesystem::path(run_dir) / "checkpoints" / checkpoint_dir_name(state.step)).string();
  if (comm.is_root()) path = save_checkpoint(run_dir, state.step, cc);
  // No rank goes on (and, at the end of a run, returns) before the checkpoint is on disk.
  comm.barrier("checkpoint written");
  return path;
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

PosttrainStart resolve_posttrain_start(const std::string& stage, const std::string& checkpoint,
                                       const std::string& run_dir, bool resume,
                                       const std::string& tokenizer_spec, int64_t window_blocks) {
  PosttrainStart s{BpeTokenizer::load(tokenizer_spec), {}, {}, {}, 0};
  s.chat = chat_tokens(s.tokenizer);
  s.checkpoint = resume ? find_latest_checkpoint(run_dir) : require_checkpoint(checkpoint);
  if (resume && s.checkpoint.empty()) {
    throw InputError(stage + " --resume: no checkpoint under '" + run_dir + "/checkpoints'");
  }
  s.config = read_checkpoint_config(s.checkpoint);
  check_chat_vocabulary(s.config, s.tokenizer, s.chat, tokenizer_spec);
  s.window_blocks =
      window_blocks > 0 ? window_blocks : attention_window_at(s.config, s.config.num_iterations);
  return s;
}

void write_posttrain_run_record(const std::string& run_dir, const std::string& stage,
                                nlohmann::ordered_json fields, const PosttrainStart& start,
                                const nlohmann::json& tokenizer_record,
                                const std::string& command_line) {
  nlohmann::ordered_json record = {
      {"stage", stage}, {"from_checkpoint", std::filesystem::absolute(start.checkpoint).string()}};
  for (auto& [key, value] : fields.items()) record[key] = value;
  record["window_blocks"] = start.window_blocks;
  record["tokenizer"] = tokenizer_record;
  record["config"] = config_to_json(start.config);
  record["revision"] = build_revision();
  record["cpu"] = cpu_info().model_name;
  record["command"] = command_line;
  write_file_atomic(run_dir + "/run.json", record.dump(2) + "\n");
}

std::vector<int64_t> epoch_order(int64_t n, uint64_t seed, int64_t epoch, uint64_t salt) {
  std::vector<int64_t> order(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) order[static_cast<size_t>(i)] = i;
  Rng rng(seed * 0x2545F4914F6CDD1Dull + static_cast<uint64_t>(epoch) + salt);
  for (int64_t i = n - 1; i > 0; --i) {
    const auto j = static_cast<int64_t>(rng.next_u64() % static_cast<uint64_t>(i + 1));
    std::swap(order[static_cast<size_t>(i)], order[static_cast<size_t>(j)]);
  }
  return order;
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
