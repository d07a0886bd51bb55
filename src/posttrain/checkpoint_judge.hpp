// A checkpoint as a rubric's judge (eval/rubric_judge.hpp's ModelJudge), with everything it
// needs kept alive: its model, its own tokenizer (a judge need not share the policy's) and the
// scorer that batches its questions. `nanogpt evals rubric --judge` and `nanogpt rl --judge`
// load their judge here.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "data/bpe_tokenizer.hpp"
#include "eval/model_scorer.hpp"
#include "eval/rubric_judge.hpp"
#include "model/gpt.hpp"

namespace nanogpt {

class CheckpointJudge {
 public:
  // `path`: a checkpoint or run directory; `tokenizer`: its tokenizer spec, empty for the one
  // recorded with its training data; `window_blocks` 0: the checkpoint's last attention window.
  // InputError naming the path when it is not a checkpoint or the tokenizer does not fit it.
  CheckpointJudge(const std::string& path, const std::string& tokenizer, int64_t window_blocks);

  RubricJudge& judge() { return *judge_; }
  const std::string& checkpoint() const { return checkpoint_; }

 private:
  std::string checkpoint_;
  std::unique_ptr<BpeTokenizer> tokenizer_;
  std::unique_ptr<Gpt> model_;
  std::unique_ptr<ModelScorer> scorer_;
  std::unique_ptr<ModelJudge> judge_;
};

}  // namespace nanogpt
