// Shared test fixtures: scratch directories and access to the built binary.
#pragma once

#include <cstdlib>
#include <filesystem>
#include <string>

namespace nanogpt {

class TempDir {
 public:
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "nanogpt-test-XXXXXX").string();
    char* p = mkdtemp(tmpl.data());
    if (p == nullptr) throw std::runtime_error("mkdtemp failed");
    path_ = p;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

inline std::string source_path(const std::string& relative) {
  return std::string(NANOGPT_SOURCE_DIR) + "/" + relative;
}

}  // namespace nanogpt
