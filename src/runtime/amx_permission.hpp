// Linux hands out the 8 KiB AMX tile state only to processes that ask for it
// (arch_prctl ARCH_REQ_XCOMP_PERM); the first tile instruction without that permission is
// killed with SIGILL. The permission is per process, so it is asked for once, before any
// thread loads a tile configuration.
#pragma once

#include <string>

namespace nanogpt {

struct AmxPermission {
  bool granted = false;
  std::string detail;  // why not, or how it was obtained: for `nanogpt info`
};

// Asks the kernel on the first call (only if the CPU reports AMX); later calls return the
// same answer.
const AmxPermission& amx_permission();

}  // namespace nanogpt
