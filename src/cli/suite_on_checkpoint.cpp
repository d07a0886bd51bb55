#include "cli/suite_on_checkpoint.hpp"

#include <algorithm>
#include <memory>
#include <vector>

#include "config/config.hpp"
#include "data/bpe_tokenizer.hpp"
#include "model/model_io.hpp"
#include "train/attention_window.hpp"
#include "train/train_state.hpp"

namespace nanogpt::cli {

EvalReport run_suite_on_checkpoint(const Suite& suite, const CheckpointRun& run,
                                   SuiteRunOptions options, int* workers_used) {
  const std::string dir = require_checkpoint(run.checkpoint);
  const std::string spec = checkpoint_tokenizer_spec(dir, run.tokenizer);
  const BpeTokenizer tok = BpeTokenizer::load(spec);
  const int workers =
      static_cast<int>(std::min<size_t>(run.threads > 0 ? static_cast<size_t>(run.threads) : 1,
                                        std::max<size_t>(1, suite.cases.size())));
  Config config = read_checkpoint_config(dir);
  if (!run.precision.empty()) set_config_value(config, "precision=" + run.precision);
  std::vector<std::unique_ptr<Gpt>> models;
  for (int w = 0; w < workers; ++w) {
    models.push_back(std::make_unique<Gpt>(config));
    load_model_weights(*models.back(), dir);
  }
  const Config& c = models.front()->config();
  check_tokenizer_fits(suite, tok, spec, c);
  std::vector<Gpt*> ptrs;
  for (auto& m : models) ptrs.push_back(m.get());
  options.window_blocks = run.window > 0 ? run.window : attention_window_at(c, c.num_iterations);
  EvalReport report = run_suite(suite, tok, ptrs, options);
  report.checkpoint = dir;
  report.tokenizer = spec;
  if (workers_used != nullptr) *workers_used = workers;
  return report;
}

}  // namespace nanogpt::cli
