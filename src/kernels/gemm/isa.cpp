#include "kernels/gemm/isa.hpp"

#include <cstdlib>

#include "runtime/amx_permission.hpp"
#include "runtime/cpu_info.hpp"
#include "runtime/error.hpp"

namespace nanogpt {

namespace {

constexpr IsaLevel kAll[] = {IsaLevel::kScalar, IsaLevel::kAvx2, IsaLevel::kAvx512, IsaLevel::kAmx};

std::string available_list() {
  std::string out;
  for (IsaLevel level : available_isas())
    out += (out.empty() ? "" : ", ") + std::string(isa_name(level));
  return out;
}

}  // namespace

const char* isa_name(IsaLevel level) {
  switch (level) {
    case IsaLevel::kScalar:
      return "scalar";
    case IsaLevel::kAvx2:
      return "avx2";
    case IsaLevel::kAvx512:
      return "avx512";
    case IsaLevel::kAmx:
      return "amx";
  }
  return "?";
}

bool isa_available(IsaLevel level, std::string* why_not) {
  const CpuInfo& cpu = cpu_info();
  auto fail = [&](const char* why) {
    if (why_not != nullptr) *why_not = why;
    return false;
  };
  switch (level) {
    case IsaLevel::kScalar:
      return true;
    case IsaLevel::kAvx2:
      return cpu.avx2 && cpu.fma ? true : fail("the CPU has no AVX2+FMA");
    case IsaLevel::kAvx512:
      return cpu.avx512f ? true : fail("the CPU has no AVX-512F");
    case IsaLevel::kAmx: {
      // The AMX packers and epilogue are AVX-512 code (BW and VL for the 16-bit moves, BF16 for
      // the conversions); every CPU with AMX-BF16 so far has all of them.
      if (!cpu.amx_tile || !cpu.amx_bf16) return fail("the CPU has no AMX-BF16");
      if (!cpu.avx512f || !cpu.avx512bw || !cpu.avx512vl || !cpu.avx512_bf16) {
        return fail("the CPU has AMX but not AVX-512F/BW/VL/BF16");
      }
      const AmxPermission& permission = amx_permission();
      if (!permission.granted) {
        if (why_not != nullptr) *why_not = "no AMX tile-data permission: " + permission.detail;
        return false;
      }
      return true;
    }
  }
  return false;
}

std::vector<IsaLevel> available_isas() {
  std::vector<IsaLevel> out;
  for (IsaLevel level : kAll) {
    if (isa_available(level)) out.push_back(level);
  }
  return out;
}

IsaLevel parse_isa_cap(const char* value) {
  if (value == nullptr || *value == '\0') return available_isas().back();
  const std::string name(value);
  for (IsaLevel level : kAll) {
    if (name != isa_name(level)) continue;
    std::string why;
    if (!isa_available(level, &why)) {
      throw InputError("NANOGPT_ISA=" + name + " asks for a path this machine cannot run (" + why +
                       "); available here: " + available_list() +
                       ". Unset NANOGPT_ISA to use the best.");
    }
    return level;
  }
  throw InputError(
      "NANOGPT_ISA='" + name +
      "' is not an instruction set; allowed: scalar, avx2, avx512, amx (available here: " +
      available_list() + ")");
}

IsaLevel isa_cap_from_env() {
  return parse_isa_cap(std::getenv("NANOGPT_ISA"));
}

IsaLevel isa_cap() {
  static const IsaLevel cap = isa_cap_from_env();
  return cap;
}

}  // namespace nanogpt
