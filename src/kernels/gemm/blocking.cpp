#include "kernels/gemm/blocking.hpp"

#include <algorithm>

#include "runtime/integer_math.hpp"

namespace nanogpt {

std::string GemmBlocking::name() const {
  const std::string rows =
      row_parts > 0 ? "rows" + std::to_string(row_parts) : "mc" + std::to_string(mc);
  return rows + "_nc" + std::to_string(nc) + "_kc" + std::to_string(kc);
}

GemmBlocking normalized(const GemmBlocking& b, const MicroKernel& kernel, int64_t M, int64_t N,
                        int64_t K) {
  const int64_t kp = round_up(std::max<int64_t>(K, 1), kernel.k_step);
  GemmBlocking out;
  const int64_t mc = b.row_parts > 0 ? ceil_div(std::max<int64_t>(M, 1), b.row_parts) : b.mc;
  out.mc = std::min(round_up(std::max<int64_t>(mc, 1), kernel.mr), round_up(M, kernel.mr));
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
  // Row blocks of equal height, as many as the threads or 2 or 4 times that, at whatever height
  // the choice is used at (the autotuner shares one among heights within a factor of two): the
  // kernel's mc rarely divides M, and where a product has few tasks (a weight gradient over
  // K = 8192: 256 rows, a few superblocks and passes, each a parallel_for of its own) a short
  // last block leaves a thread idle at every one of them. Measured (2 threads, Intel Xeon
  // without AMX, fp32 TN 256 × 1024 × 8192, best of 30, three runs each): mc 48 (five blocks of
  // 48, one of 16) 193–196 GFLOP/s, four blocks of 64 215–222.
  const int64_t t = std::max(threads, 1);
  for (int64_t parts = t; parts <= 4 * t; parts *= 2) {
    for (int64_t nc : {d.nc, d.nc * 2}) {
      for (int64_t kc : {int64_t{256}, int64_t{512}}) {
        GemmBlocking b{0, nc, kc};
        b.row_parts = parts;
        b = normalized(b, kernel, M, N, K);
        // Not where a candidate already does the same work at this height.
        const bool new_work = std::none_of(out.begin(), out.end(), [&](const GemmBlocking& o) {
          return o.mc == b.mc && o.nc == b.nc && o.kc == b.kc;
        });
        b.row_parts = parts;  // kept, so the choice refits to the height it is used at
        if (new_work) out.push_back(b);
      }
    }
  }
  return out;
}

}  // namespace nanogpt
