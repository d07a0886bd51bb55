#include "kernels/gemm/kernel_rate.hpp"

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/bf16.hpp"
#include "runtime/aligned_memory.hpp"
#include "runtime/error.hpp"
#include "runtime/stopwatch.hpp"

namespace nanogpt {

namespace {

// Values in [-1, 1) in the kernel's packed element format. Not zeros: the AMX unit ran ~20%
// faster on all-zero tiles than on these, so a probe on zeros would overstate the rate.
void fill_panel(AlignedVector<std::byte>& panel, int64_t packed_bytes, uint32_t seed) {
  uint32_t s = seed;
  auto next = [&s] {
    s = s * 1664525u + 1013904223u;
    return static_cast<float>(s >> 8) / static_cast<float>(1u << 23) - 1.0f;
  };
  for (size_t i = 0; i + static_cast<size_t>(packed_bytes) <= panel.size();
       i += static_cast<size_t>(packed_bytes)) {
    if (packed_bytes == 2) {
      const bf16 v = to_bf16(next());
      std::memcpy(&panel[i], &v, sizeof v);
    } else {
      const float v = next();
      std::memcpy(&panel[i], &v, sizeof v);
    }
  }
}

}  // namespace

KernelRate measure_kernel_rate(const MicroKernel& kernel, double total_seconds,
                               double window_seconds) {
  if (!(window_seconds > 0) || !(total_seconds >= window_seconds) || !(total_seconds <= 60)) {
    throw InputError("kernel rate probe: needs 0 < window (" + std::to_string(window_seconds) +
                     " s) <= total (" + std::to_string(total_seconds) + " s) <= 60 s");
  }
  constexpr int64_t kc = 256;
  AlignedVector<std::byte> a(static_cast<size_t>(kernel.mr * kc * kernel.packed_bytes));
  AlignedVector<std::byte> b(static_cast<size_t>(kernel.nr * kc * kernel.packed_bytes));
  fill_panel(a, kernel.packed_bytes, 1);
  fill_panel(b, kernel.packed_bytes, 2);
  AlignedVector<float> acc(static_cast<size_t>(kernel.mr * kernel.nr));
  const double flops_per_call = 2.0 * static_cast<double>(kernel.mr * kernel.nr * kc);

  if (kernel.begin_task != nullptr) kernel.begin_task();
  // Calls per window from a first timed batch (which also warms the caches and the unit).
  int64_t calls = 1;
  for (;;) {
    const Stopwatch watch;
    for (int64_t r = 0; r < calls; ++r)
      kernel.fn(kc, a.data(), b.data(), acc.data(), kernel.nr, r > 0);
    if (watch.seconds() >= window_seconds / 4 || calls >= (int64_t{1} << 30)) break;
    calls *= 2;
  }
  std::vector<double> rates;
  const Stopwatch total;
  while (rates.size() < 3 || total.seconds() < total_seconds) {
    const Stopwatch watch;
    int64_t done = 0;
    // Whole batches of `calls` until the window is full: the clock is read once per batch.
    do {
      for (int64_t r = 0; r < calls; ++r) {
        kernel.fn(kc, a.data(), b.data(), acc.data(), kernel.nr, r > 0);
      }
      done += calls;
    } while (watch.seconds() < window_seconds);
    rates.push_back(static_cast<double>(done) * flops_per_call / watch.seconds() * 1e-9);
  }
  if (kernel.end_task != nullptr) kernel.end_task();

  std::sort(rates.begin(), rates.end());
  KernelRate r;
  r.isa = kernel.isa;
  r.windows = static_cast<int64_t>(rates.size());
  r.min_gflops = rates.front();
  r.median_gflops = rates[rates.size() / 2];
  r.max_gflops = rates.back();
  return r;
}

}  // namespace nanogpt
