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

#include <sys/wait.h>

#include "runtime/file_io.hpp"

namespace nanogpt {

struct CommandResult {
  int exit_code;
  std::string out, err;
};

// Runs `command` (a shell command line) with `input` on stdin.
inline CommandResult run_command(const std::string& command, const std::string& input = "") {
  TempDir dir;
  write_file_atomic(dir.path() + "/in", input);
  std::string cmd =
      command + " <" + dir.path() + "/in >" + dir.path() + "/out 2>" + dir.path() + "/err";
  int status = std::system(cmd.c_str());
  CommandResult r;
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128;
  r.out = read_file(dir.path() + "/out");
  r.err = read_file(dir.path() + "/err");
  return r;
}

// Runs the built `nanogpt` binary with `args` (shell words) and `input` on stdin.
inline CommandResult run_nanogpt(const std::string& args, const std::string& input = "") {
  return run_command(std::string(NANOGPT_BINARY) + " " + args, input);
}

}  // namespace nanogpt
