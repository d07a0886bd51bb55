// `nanogpt info`: the build, the CPU and what was detected on it.
#include <cstdio>

#include "cli/commands.hpp"
#include "runtime/cpu_info.hpp"
#include "runtime/thread_pool.hpp"

namespace nanogpt::cli {

void register_info(CLI::App& app) {
  auto* cmd = app.add_subcommand("info", "Print the build, the CPU and its detected features");
  cmd->callback([] {
    const CpuInfo& c = cpu_info();
    auto yn = [](bool b) { return b ? "yes" : "no"; };
    std::printf("nanogpt %s (revision %s)\n", NANOGPT_VERSION, NANOGPT_GIT_REVISION);
    std::printf("cpu: %s, %d logical cores; threads used: %d\n", c.model_name.c_str(),
                c.logical_cores, ThreadPool::default_threads());
    std::printf("avx2+fma: %s  avx512f: %s  avx512bw: %s  avx512_bf16: %s  amx_bf16: %s\n",
                yn(c.avx2 && c.fma), yn(c.avx512f), yn(c.avx512bw), yn(c.avx512_bf16),
                yn(c.amx_bf16 && c.amx_tile));
  });
}

}  // namespace nanogpt::cli
