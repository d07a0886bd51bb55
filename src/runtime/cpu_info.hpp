// What the CPU is and which instruction sets it offers, read at run time so one binary picks
// the best kernels on any x86-64 machine.
#pragma once

#include <string>

namespace nanogpt {

struct CpuInfo {
  std::string model_name;
  int logical_cores = 1;
  bool avx2 = false, fma = false, avx512f = false, avx512bw = false, avx512vl = false;
  bool avx512_bf16 = false;
  bool amx_tile = false, amx_bf16 = false;
};

const CpuInfo& cpu_info();

// The 1-minute load average (-1 if the OS does not say): other work on the machine skews
// timings, and every timed result prints how much there was.
double load_average();

}  // namespace nanogpt
