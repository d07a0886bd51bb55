#include "posttrain/checkpoint_judge.hpp"

#include "eval/suite.hpp"
#include "eval/suite_runner.hpp"
#include "model/model_io.hpp"
#include "train/attention_window.hpp"
#include "train/train_state.hpp"

namespace nanogpt {

CheckpointJudge::CheckpointJudge(const std::string& path, const std::string& tokenizer,
                                 int64_t window_blocks)
    : checkpoint_(require_checkpoint(path)) {
  const std::string spec = checkpoint_tokenizer_spec(checkpoint_, tokenizer);
  tokenizer_ = std::make_unique<BpeTokenizer>(BpeTokenizer::load(spec));
  model_ = std::make_unique<Gpt>(read_checkpoint_config(checkpoint_));
  load_model_weights(*model_, checkpoint_);
  const Config& c = model_->config();
  check_tokenizer_fits(Suite{}, *tokenizer_, spec, c);
  scorer_ = std::make_unique<ModelScorer>(
      *model_, window_blocks > 0 ? window_blocks : attention_window_at(c, c.num_iterations));
  judge_ = std::make_unique<ModelJudge>(*scorer_, *tokenizer_);
}

}  // namespace nanogpt
