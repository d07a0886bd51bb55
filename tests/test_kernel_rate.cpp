// The micro-kernel probe (kernels/gemm/kernel_rate.hpp) on every kernel the tests run, the AMX
// tile model included: windows of at least the asked length, rates ordered and positive, the
// kernel's name, and clear errors for bad durations. Rates themselves are never asserted: the
// machine is shared.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <utility>

#include "kernels/gemm/kernel_rate.hpp"
#include "runtime/error.hpp"
#include "support/kernels.hpp"

namespace nanogpt {
namespace {

void expect_sane(const MicroKernel& k, double total, double window) {
  const KernelRate r = measure_kernel_rate(k, total, window);
  EXPECT_EQ(std::string(r.isa), std::string(k.isa));
  // At least three windows; each lasts at least `window`, and no window starts after `total`.
  EXPECT_GE(r.windows, 3) << k.isa;
  EXPECT_LE(r.windows, std::max<int64_t>(3, static_cast<int64_t>(std::ceil(total / window)) + 1))
      << k.isa;
  EXPECT_GT(r.min_gflops, 0) << k.isa;
  EXPECT_TRUE(std::isfinite(r.max_gflops)) << k.isa;
  EXPECT_LE(r.min_gflops, r.median_gflops) << k.isa;
  EXPECT_LE(r.median_gflops, r.max_gflops) << k.isa;
}

TEST(KernelRate, EveryKernelGivesOrderedPositiveRates) {
  for (const MicroKernel& k : available_microkernels()) expect_sane(k, 0.04, 0.01);
  for (const MicroKernel& k : bf16_microkernels_and_tile_model()) expect_sane(k, 0.04, 0.01);
}

TEST(KernelRate, BadDurationsAreInputErrors) {
  const MicroKernel& k = active_microkernel();
  const double nan = std::nan("");
  const std::pair<double, double> bad[] = {{0.0, 0.01},  {0.01, 0.0}, {0.01, 0.02},
                                           {61.0, 0.01}, {nan, 0.01}, {0.01, nan}};
  for (const auto& [total, window] : bad) {
    try {
      measure_kernel_rate(k, total, window);
      ADD_FAILURE() << "no error for total " << total << ", window " << window;
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find("kernel rate probe"), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace nanogpt
