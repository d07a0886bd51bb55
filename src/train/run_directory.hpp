// A training run's directory, apart from its checkpoints: run.json (what ran: configuration,
// revision, CPU, resolved precision, command, data, tokenizer) and metrics.jsonl (one JSON line
// per step). A resumed run's metrics are cut back to the checkpoint's step, so the file reads
// as if the run had never stopped.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "config/config.hpp"
#include "kernels/matmul.hpp"

namespace nanogpt {

// What run.json records beside the configuration and the machine.
struct RunRecord {
  const Config* config = nullptr;
  Precision precision = Precision::kFp32;  // resolved: the model's
  std::string command_line;
  std::string train_pattern, val_pattern;
  std::vector<std::string> train_files;
  nlohmann::json tokenizer;  // the shards' (null if unknown)
  int64_t resumed_from_step = 0;
  // The job: its ranks' hosts, by rank (one entry in a single process).
  std::vector<std::string> hosts;
};

class RunDirectory {
 public:
  // Creates the directory if needed.
  explicit RunDirectory(std::string path);

  const std::string& path() const { return path_; }
  std::string metrics_path() const { return path_ + "/metrics.jsonl"; }

  // A fresh run: an empty metrics.jsonl.
  void start_metrics() const;
  // A resumed run: keeps only the metrics lines of steps up to `step` (a torn last line from a
  // crash is dropped).
  void truncate_metrics(int64_t step) const;
  void append_metrics(const nlohmann::ordered_json& line) const;
  void write_run_record(const RunRecord& record) const;

 private:
  std::string path_;
};

}  // namespace nanogpt
