// Errors that reach the user. Every message says what went wrong, where, and how to fix it;
// the CLI prints it and exits non-zero. Library code throws, it never calls exit().
#pragma once

#include <stdexcept>
#include <string>

namespace nanogpt {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message) {}
};

// Input the user gave us is malformed (a file, a flag, a configuration).
class InputError : public Error {
 public:
  explicit InputError(const std::string& message) : Error(message) {}
};

// The operating system refused something (open, write, rename, mmap).
class SystemError : public Error {
 public:
  SystemError(const std::string& what, const std::string& path, int errnum);
};

}  // namespace nanogpt
