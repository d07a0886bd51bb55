#include "runtime/checkpoint.hpp"

#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <random>

#include "runtime/error.hpp"
#include "runtime/file_io.hpp"
#include "runtime/safetensors.hpp"

namespace nanogpt {

namespace fs = std::filesystem;

namespace {

void write_tensors(const std::string& path, const std::vector<CheckpointTensor>& tensors,
                   const std::map<std::string, std::string>& metadata) {
  SafetensorsWriter w;
  for (const auto& [k, v] : metadata) w.set_metadata(k, v);
  for (const CheckpointTensor& t : tensors) {
    size_t numel = 1;
    for (int64_t s : t.shape) numel *= static_cast<size_t>(s);
    w.add_borrowed(t.name, Dtype::kF32, t.shape,
                   std::span(reinterpret_cast<const uint8_t*>(t.data), numel * sizeof(float)));
  }
  w.write(path);
}

bool is_complete(const fs::path& dir) {
  return fs::exists(dir / "meta.json") && fs::exists(dir / "model.safetensors") &&
         fs::exists(dir / "optimizer.safetensors");
}

}  // namespace

std::string checkpoint_dir_name(int64_t step) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "step_%06lld", static_cast<long long>(step));
  return buf;
}

std::string save_checkpoint(const std::string& run_dir, int64_t step,
                            const CheckpointContents& contents) {
  const fs::path root = fs::path(run_dir) / "checkpoints";
  std::error_code ec;
  fs::create_directories(root, ec);
  if (ec) throw SystemError("cannot create directory", root.string(), ec.value());
  std::mt19937_64 rng{std::random_device{}()};
  const std::string name = checkpoint_dir_name(step);
  const fs::path temp =
      root / ("." + name + std::string(kTempMarker) + std::to_string(rng() % 1000000000));
  fs::create_directory(temp, ec);
  if (ec) throw SystemError("cannot create directory", temp.string(), ec.value());
  try {
    write_tensors((temp / "model.safetensors").string(), contents.model, contents.model_metadata);
    write_tensors((temp / "optimizer.safetensors").string(), contents.optimizer,
                  contents.optimizer_metadata);
    for (const auto& [file, bytes] : contents.files) {
      if (file.empty() || file.find('/') != std::string::npos || file == "meta.json" ||
          file == "model.safetensors" || file == "optimizer.safetensors") {
        throw Error("save_checkpoint: '" + file + "' cannot be a further file of a checkpoint");
      }
      write_file_atomic((temp / file).string(), bytes);
    }
    write_file_atomic((temp / "meta.json").string(), contents.meta.dump(2) + "\n");
  } catch (...) {
    fs::remove_all(temp, ec);
    throw;
  }
  const fs::path target = root / name;
  fs::path old;
  if (fs::exists(target)) {
    old = root /
          ("." + name + ".old" + std::string(kTempMarker) + std::to_string(rng() % 1000000000));
    fs::rename(target, old);
  }
  fs::rename(temp, target);
  if (!old.empty()) fs::remove_all(old, ec);
  return target.string();
}

std::string find_latest_checkpoint(const std::string& run_dir) {
  const fs::path p(run_dir);
  if (is_complete(p)) return p.string();
  const fs::path root = p / "checkpoints";
  if (!fs::is_directory(root)) return "";
  std::string best;
  for (const auto& entry : fs::directory_iterator(root)) {
    const std::string n = entry.path().filename().string();
    if (n.rfind("step_", 0) != 0 || !entry.is_directory() || !is_complete(entry.path())) continue;
    if (best.empty() || n > fs::path(best).filename().string()) best = entry.path().string();
  }
  return best;
}

}  // namespace nanogpt
