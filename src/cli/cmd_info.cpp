// `nanogpt info`: the build, the CPU, what was detected on it and which GEMM kernels run.
#include <cstdio>
#include <cstdlib>
#include <string>

#include "cli/commands.hpp"
#include "kernels/gemm/isa.hpp"
#include "kernels/gemm/microkernel.hpp"
#include "runtime/amx_permission.hpp"
#include "runtime/build_info.hpp"
#include "runtime/cpu_info.hpp"
#include "runtime/error.hpp"
#include "runtime/thread_pool.hpp"

namespace nanogpt::cli {

namespace {

std::string describe(const MicroKernel& k, bool bf16) {
  std::string s = std::string(k.isa) + " " + std::to_string(k.mr) + "x" + std::to_string(k.nr);
  if (bf16 && !k.bf16_products) s += " (fp32 kernel on operands rounded to bf16)";
  return s;
}

}  // namespace

void register_info(CLI::App& app) {
  auto* cmd = app.add_subcommand("info", "Print the build, the CPU and its detected features");
  cmd->callback([] {
    const CpuInfo& c = cpu_info();
    auto yn = [](bool b) { return b ? "yes" : "no"; };
    std::printf("nanogpt %s (revision %s)\n", NANOGPT_VERSION, build_revision());
    std::printf("cpu: %s, %d logical cores; threads used: %d\n", c.model_name.c_str(),
                c.logical_cores, ThreadPool::default_threads());
    std::printf("avx2+fma: %s  avx512f: %s  avx512bw: %s  avx512_bf16: %s  amx_bf16: %s\n",
                yn(c.avx2 && c.fma), yn(c.avx512f), yn(c.avx512bw), yn(c.avx512_bf16),
                yn(c.amx_bf16 && c.amx_tile));
    if (c.amx_bf16 && c.amx_tile) {
      const AmxPermission& p = amx_permission();
      std::printf("amx tile-data permission: %s (%s)\n", p.granted ? "granted" : "refused",
                  p.detail.c_str());
    }
    std::string have;
    for (IsaLevel level : available_isas())
      have += (have.empty() ? "" : ", ") + std::string(isa_name(level));
    std::printf("isa levels available: %s\n", have.c_str());
    for (IsaLevel level : {IsaLevel::kAvx2, IsaLevel::kAvx512, IsaLevel::kAmx}) {
      std::string why;
      if (!isa_available(level, &why))
        std::printf("  %s unavailable: %s\n", isa_name(level), why.c_str());
    }
    const char* forced = std::getenv("NANOGPT_ISA");
    try {
      const IsaLevel cap = isa_cap_from_env();
      std::printf("isa in use: %s (%s)\n", isa_name(cap),
                  forced != nullptr && *forced != '\0' ? "NANOGPT_ISA" : "best available");
      std::printf("fp32 gemm kernel: %s\n", describe(fp32_microkernel_for(cap), false).c_str());
      std::printf("bf16 gemm kernel: %s\n", describe(bf16_microkernel_for(cap), true).c_str());
    } catch (const InputError& e) {
      // info still reports the machine; the GEMMs would stop with this error.
      std::printf("isa in use: none, %s\n", e.what());
    }
  });
}

}  // namespace nanogpt::cli
