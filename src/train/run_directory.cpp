#include "train/run_directory.hpp"

#include <cerrno>
#include <cstdio>
#include <filesystem>

#include "kernels/gemm/microkernel.hpp"
#include "runtime/build_info.hpp"
#include "runtime/cpu_info.hpp"
#include "runtime/error.hpp"
#include "runtime/file_io.hpp"
#include "runtime/thread_pool.hpp"

namespace nanogpt {

RunDirectory::RunDirectory(std::string path) : path_(std::move(path)) {
  std::error_code ec;
  std::filesystem::create_directories(path_, ec);
  if (ec) throw SystemError("cannot create run directory", path_, ec.value());
}

void RunDirectory::start_metrics() const {
  write_file_atomic(metrics_path(), "");
}

void RunDirectory::truncate_metrics(int64_t step) const {
  const std::string path = metrics_path();
  if (!file_exists(path)) return;
  std::string text = read_file(path), kept;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string::npos) break;  // a torn last line from a crash is dropped
    std::string line = text.substr(pos, end - pos);
    pos = end + 1;
    try {
      auto j = nlohmann::json::parse(line);
      if (j.value("step", int64_t{0}) <= step) kept += line + "\n";
    } catch (const nlohmann::json::exception&) {
    }
  }
  write_file_atomic(path, kept);
}

void RunDirectory::append_metrics(const nlohmann::ordered_json& line) const {
  const std::string path = metrics_path();
  FILE* f = std::fopen(path.c_str(), "a");
  if (f == nullptr) throw SystemError("cannot append to", path, errno);
  std::fprintf(f, "%s\n", line.dump().c_str());
  std::fclose(f);
}

void RunDirectory::write_run_record(const RunRecord& r) const {
  nlohmann::ordered_json run;
  run["config"] = config_to_json(*r.config);
  run["version"] = NANOGPT_VERSION;
  run["revision"] = build_revision();
  run["cpu"] = cpu_info().model_name;
  run["threads"] = ThreadPool::current().size();  // per rank
  run["world_size"] = r.hosts.size();
  run["hosts"] = r.hosts;
  // What `precision: auto` and the ISA dispatch chose here: a resume elsewhere may differ.
  run["precision"] = precision_name(r.precision);
  run["gemm_kernel"] =
      r.precision == Precision::kBf16 ? active_bf16_microkernel().isa : active_microkernel().isa;
  run["command"] = r.command_line;
  run["train"] = r.train_pattern;
  run["val"] = r.val_pattern;
  run["train_files"] = r.train_files;
  run["tokenizer"] = r.tokenizer;
  run["resumed_from_step"] = r.resumed_from_step;
  write_file_atomic(path_ + "/run.json", run.dump(2) + "\n");
}

}  // namespace nanogpt
