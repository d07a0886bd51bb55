#include "runtime/cpu_info.hpp"

#include <cpuid.h>

#include <cstdlib>
#include <fstream>
#include <thread>

namespace nanogpt {

namespace {

std::string read_model_name() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0) {
      auto colon = line.find(':');
      if (colon != std::string::npos) return line.substr(line.find_first_not_of(' ', colon + 1));
    }
  }
  return "unknown CPU";
}

// XCR0 says which register states the OS saves on context switch; without that, the
// instructions exist but may not be used.
uint64_t read_xcr0() {
  uint32_t eax, edx;
  __asm__ volatile("xgetbv" : "=a"(eax), "=d"(edx) : "c"(0));
  return (uint64_t(edx) << 32) | eax;
}

CpuInfo detect() {
  CpuInfo info;
  info.model_name = read_model_name();
  unsigned hw = std::thread::hardware_concurrency();
  info.logical_cores = hw == 0 ? 1 : static_cast<int>(hw);
  unsigned a, b, c, d;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return info;
  bool osxsave = (c >> 27) & 1;
  if (!osxsave) return info;
  uint64_t xcr0 = read_xcr0();
  bool ymm = (xcr0 & 0x6) == 0x6;
  bool zmm = ymm && (xcr0 & 0xE0) == 0xE0;
  bool tiles = (xcr0 & (3ULL << 17)) == (3ULL << 17);
  info.fma = ymm && ((c >> 12) & 1);
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return info;
  info.avx2 = ymm && ((b >> 5) & 1);
  info.avx512f = zmm && ((b >> 16) & 1);
  info.avx512bw = zmm && ((b >> 30) & 1);
  info.avx512vl = zmm && ((b >> 31) & 1);
  info.amx_bf16 = tiles && ((d >> 22) & 1);
  info.amx_tile = tiles && ((d >> 24) & 1);
  unsigned a1, b1, c1, d1;
  if (__get_cpuid_count(7, 1, &a1, &b1, &c1, &d1)) info.avx512_bf16 = zmm && ((a1 >> 5) & 1);
  return info;
}

}  // namespace

const CpuInfo& cpu_info() {
  static const CpuInfo info = detect();
  return info;
}

}  // namespace nanogpt

namespace nanogpt {

double load_average() {
  double load[1] = {-1};
  return getloadavg(load, 1) == 1 ? load[0] : -1;
}

}  // namespace nanogpt
