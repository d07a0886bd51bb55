#include "kernels/gemm/blocking.hpp"

#include <algorithm>

#include "runtime/integer_math.hpp"

namespace nanogpt {

std::string GemmBlocking::name() const {
  return "mc" + std::to_string(mc) + "_nc" + std::to_string(nc) + "_kc" + std::to_string(kc);
}

GemmBlocking normalized(const GemmBlocking& b, const MicroKernel& kernel, int64_t M, int64_t N,
                        int64_t K) {
  const int64_t kp = round_up(std::max<int64_t>(K, 1), kernel.k_step);
  GemmBlocking out;
  out.mc = std::min(round_up(std::max<int64_t>(b.mc, 1), kernel.mr), round_up(M, kernel.mr));
  out.nc = std::min(round_up(std::max<int64_t>(b.nc, 1), kernel.nr), round_up(N, kernel.nr));
  out.kc = b.kc <= 0 ? kp : std::min(round_up(b.kc, kernel.k_step), kp);
  return out;
}

GemmBlocking default_blocking(const MicroKernel& kernel, int64_t M, int64_t N, int64_t K,
                              int threads) {
  GemmBlocking b = normalized(kernel.blocking, kernel, M, N, K);
  // An empty C has no tasks to balance (and its mc or nc is 0).
  if (M <= 0 || N <= 0) return b;
  // Enough tasks that the threads finish together: shrink the task width, then the height.
  const int64_t want = 4 * static_cast<int64_t>(std::max(threads, 1));
  while (ceil_div(M, b.mc) * ceil_div(N, b.nc) < want && b.nc > kernel.nr) {
    b.nc = round_up(b.nc / 2, kernel.nr);
  }
  while (ceil_div(M, b.mc) * ceil_div(N, b.nc) < want && b.mc > kernel.mr) {
    b.mc = round_up(b.mc / 2, kernel.mr);
  }
  return b;
}

std::vector<GemmBlocking> blocking_candidates(const MicroKernel& kernel, int64_t M, int64_t N,
                                              int64_t K, int threads) {
  std::vector<GemmBlocking> out = {default_blocking(kernel, M, N, K, threads)};
  auto add = [&](GemmBlocking b) {
    b = normalized(b, kernel, M, N, K);
    if (std::find(out.begin(), out.end(), b) == out.end()) out.push_back(b);
  };
  const GemmBlocking d = out.front();
  // Shallow kc keeps a B micro-panel (kc·nr floats) and the A micro-panel streaming past it
  // within L1 (48 KiB here: kc = 256 fills 40 KiB of it); deep kc re-reads C less often.
  for (int64_t kc : {int64_t{128}, int64_t{192}, int64_t{256}, int64_t{512}, int64_t{0}}) {
    add({d.mc, d.nc, kc});
    add({d.mc * 2, d.nc / 2, kc});
    add({d.mc / 2, d.nc * 2, kc});
  }
  return out;
}

}  // namespace nanogpt
