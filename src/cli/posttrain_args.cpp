#include "cli/posttrain_args.hpp"

#include <filesystem>

#include "model/model_io.hpp"
#include "runtime/error.hpp"
#include "train/train_state.hpp"

namespace nanogpt::cli {

PosttrainTokenizer resolve_posttrain_args(const std::string& stage, const std::string& checkpoint,
                                          const std::string& out, bool resume,
                                          const std::string& tokenizer) {
  if (!resume) {
    if (checkpoint.empty()) throw InputError(stage + ": --checkpoint DIR is required");
    if (std::filesystem::exists(out + "/checkpoints")) {
      throw InputError("--out " + out +
                       " already holds checkpoints: pass --resume to continue it, or give a new "
                       "directory");
    }
  }
  const std::string ckpt = require_checkpoint(resume ? out : checkpoint);
  return {checkpoint_tokenizer_spec(ckpt, tokenizer), checkpoint_tokenizer_record(ckpt)};
}

}  // namespace nanogpt::cli
