#include "runtime/error.hpp"

#include <cstring>

namespace nanogpt {

SystemError::SystemError(const std::string& what, const std::string& path, int errnum)
    : Error(what + " '" + path + "': " + std::strerror(errnum)) {}

}  // namespace nanogpt
