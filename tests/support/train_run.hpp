// A training run of the micro model on synthetic shards (write_synthetic_shards) in
// `data_dir`, into `run_dir`, with no live line: what trainer tests start from.
#pragma once

#include <string>

#include "model.hpp"
#include "train/trainer.hpp"

namespace nanogpt {

inline TrainOptions micro_train_options(const std::string& data_dir, const std::string& run_dir) {
  TrainOptions o;
  o.config = micro_config();
  o.train_pattern = data_dir + "/train_*.bin";
  o.val_pattern = data_dir + "/val_*.bin";
  o.run_dir = run_dir;
  o.live_line = false;
  return o;
}

}  // namespace nanogpt
