// Instruction-set levels for the GEMMs, ordered scalar < avx2 < avx512 < amx. NANOGPT_ISA caps
// the level: the fp32 GEMM uses its best kernel at or below the cap (AMX has no fp32 product,
// so `amx` gives the avx512 fp32 kernel), the bf16 GEMM the kernel of the cap itself.
#pragma once

#include <string>
#include <vector>

namespace nanogpt {

enum class IsaLevel { kScalar = 0, kAvx2 = 1, kAvx512 = 2, kAmx = 3 };

const char* isa_name(IsaLevel level);

// Whether this CPU (and, for AMX, the OS's permission) allows the level, and if not, why.
bool isa_available(IsaLevel level, std::string* why_not = nullptr);
std::vector<IsaLevel> available_isas();

// The level named by NANOGPT_ISA, or the best available when it is unset or empty. Throws
// InputError for an unknown name or a level this CPU lacks; the message names the value, the
// allowed names and what is available here.
IsaLevel isa_cap_from_env();
// The same for a given value (nullptr: unset), so the rules can be tested without the
// environment.
IsaLevel parse_isa_cap(const char* value);
// Read once from the environment, as the kernels use it.
IsaLevel isa_cap();

}  // namespace nanogpt
