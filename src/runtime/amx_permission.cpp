#include "runtime/amx_permission.hpp"

#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "runtime/cpu_info.hpp"

namespace nanogpt {

namespace {

// From <asm/prctl.h> and the kernel's xstate numbering; spelled out because older headers
// lack them.
constexpr int kArchGetXcompPerm = 0x1022;
constexpr int kArchReqXcompPerm = 0x1023;
constexpr unsigned long kXfeatureXtiledata = 18;

AmxPermission request() {
  const CpuInfo& cpu = cpu_info();
  if (!cpu.amx_tile || !cpu.amx_bf16) return {false, "the CPU (or the OS's XCR0) has no AMX-BF16"};
  unsigned long features = 0;
  if (syscall(SYS_arch_prctl, kArchGetXcompPerm, &features) == 0 &&
      (features & (1ul << kXfeatureXtiledata)) != 0) {
    return {true, "already granted to this process"};
  }
  if (syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) != 0) {
    const int err = errno;
    return {false, std::string("the kernel refused arch_prctl(ARCH_REQ_XCOMP_PERM, XTILEDATA): ") +
                       std::strerror(err)};
  }
  features = 0;
  if (syscall(SYS_arch_prctl, kArchGetXcompPerm, &features) != 0 ||
      (features & (1ul << kXfeatureXtiledata)) == 0) {
    return {false, "arch_prctl accepted the request but XTILEDATA is still not permitted"};
  }
  return {true, "granted by arch_prctl(ARCH_REQ_XCOMP_PERM)"};
}

}  // namespace

const AmxPermission& amx_permission() {
  static const AmxPermission permission = request();
  return permission;
}

}  // namespace nanogpt
