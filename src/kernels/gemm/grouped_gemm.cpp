// The grouped GEMM (kernels/grouped_gemm.hpp) on the single GEMM's micro-kernels, packers and
// layouts. A call runs two parallel loops: the first packs every group's A and B micro-panels
// (each group's own packed block, so panels never straddle groups), the second computes every
// group's MC×NC tiles of C from them. A tile's whole reduction runs in one task, K block after
// K block continuing the fp32 accumulator as the driver does, so a tile's bits are those of a
// gemm() of that group alone with the same kernel, whatever the threads.
#include <algorithm>
#include <cstddef>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/gemm/blocking.hpp"
#include "kernels/gemm/microkernel.hpp"
#include "kernels/gemm/pack_panels.hpp"
#include "kernels/grouped_gemm.hpp"
#include "runtime/error.hpp"
#include "runtime/integer_math.hpp"
#include "runtime/thread_pool.hpp"
#include "runtime/workspace.hpp"

namespace nanogpt {

namespace {

// One group's product C = alpha·op(A)·op(B) + beta·C, with each operand described as its
// packer reads it: Y[i][k] = src[i·ld + k] (kNo) or src[k·ld + i] (kYes), where Y is op(A)
// for A and op(B)ᵀ for B.
struct Group {
  int64_t M = 0, N = 0, K = 0;
  const float* a = nullptr;
  int64_t lda = 0;
  Trans a_order = Trans::kNo;
  const float* b = nullptr;
  int64_t ldb = 0;
  Trans b_order = Trans::kNo;
  float* c = nullptr;
  int64_t ldc = 0;
  int64_t epilogue_row = 0;  // C's first row in the epilogue's coordinates
  // Filled in by run_grouped: padded extents, where the packed blocks are, their layouts.
  int64_t kp = 0, mp = 0, np = 0;
  int64_t a_at = 0, b_at = 0;  // bytes into the packed buffers
  layout::Layout la, lb;
};

struct PackTask {
  size_t group;
  bool b;              // which operand
  int64_t first, end;  // panels
};

struct TileTask {
  size_t group;
  int64_t i0, j0;
};

void run_grouped(const MicroKernel& kernel, PackSource source, std::vector<Group>& groups,
                 float alpha, float beta, const GemmEpilogue* epilogue) {
  if (epilogue != nullptr && epilogue->c_bf16_only) {
    throw std::invalid_argument(
        "grouped_gemm: an epilogue with c_bf16_only is not supported by the grouped products "
        "(their C is always written); unset it");
  }
  if (source != PackSource::kF32 && source != PackSource::kF32ToBf16) {
    throw std::invalid_argument("grouped GEMM: operands are fp32 (PackSource kF32 or kF32ToBf16)");
  }
  const PanelPackFn pack_a = kernel.pack_a[static_cast<int>(source)];
  const PanelPackFn pack_b = kernel.pack_b[static_cast<int>(source)];
  if (pack_a == nullptr || pack_b == nullptr) {
    throw std::invalid_argument(std::string("grouped GEMM: the ") + kernel.isa +
                                " kernel cannot read this operand type");
  }
  const int64_t mr = kernel.mr, nr = kernel.nr, bytes = kernel.packed_bytes;

  // One blocking for all groups, sized as for their stacked rows: the task count that keeps the
  // threads busy counts every group's tiles.
  int64_t rows = 0, max_n = 1, max_k = 1;
  for (const Group& g : groups) {
    rows += g.M;
    max_n = std::max(max_n, g.N);
    max_k = std::max(max_k, g.K);
  }
  if (rows == 0) return;
  const int threads = ThreadPool::current().size();
  const GemmBlocking blk = default_blocking(kernel, rows, max_n, max_k, threads);

  // A task's accumulator: two tiles taken in turn, 4 KiB + 256 B apart (see the driver: no false
  // store aliasing), or the task's whole block when its group's K takes several K blocks.
  const int64_t tile_stride = mr * nr + 64;
  int64_t acc_floats = 2 * tile_stride;
  std::vector<PackTask> pack_tasks;
  std::vector<TileTask> tile_tasks;
  int64_t a_bytes = 0, b_bytes = 0;
  for (size_t gi = 0; gi < groups.size(); ++gi) {
    Group& g = groups[gi];
    if (g.M == 0 || g.N == 0) continue;
    const int64_t mc = std::min(blk.mc, round_up(g.M, mr));
    const int64_t nc = std::min(blk.nc, round_up(g.N, nr));
    for (int64_t i0 = 0; i0 < g.M; i0 += mc) {
      for (int64_t j0 = 0; j0 < g.N; j0 += nc) tile_tasks.push_back({gi, i0, j0});
    }
    if (g.K == 0) continue;  // C = beta·C: no operands to pack
    g.kp = round_up(g.K, kernel.k_step);
    if (g.kp > blk.kc) acc_floats = std::max(acc_floats, mc * nc);
    g.mp = round_up(g.M, mr);
    g.np = round_up(g.N, nr);
    g.la = kernel.a_layout(g.mp, g.kp);
    g.lb = kernel.b_layout(g.kp, g.np);
    if (!g.la.separable() || !g.lb.separable()) {
      throw std::invalid_argument("grouped GEMM: packed layouts must be separable");
    }
    g.a_at = a_bytes;
    g.b_at = b_bytes;
    a_bytes += g.mp * g.kp * bytes;
    b_bytes += g.np * g.kp * bytes;
    for (int64_t i0 = 0; i0 < g.M; i0 += mc) {
      pack_tasks.push_back({gi, false, i0 / mr, ceil_div(std::min(i0 + mc, g.M), mr)});
    }
    for (int64_t j0 = 0; j0 < g.N; j0 += nc) {
      pack_tasks.push_back({gi, true, j0 / nr, ceil_div(std::min(j0 + nc, g.N), nr)});
    }
  }

  // Scratch from the caller's workspace (runtime/workspace.hpp), as the driver's: every
  // group's packed operands for the calling thread, and one accumulator per pool worker,
  // passed in below.
  Workspace& ws = Workspace::current();
  char* pa = ws.get<char>("grouped_gemm.packed_a", static_cast<size_t>(a_bytes));
  char* pb = ws.get<char>("grouped_gemm.packed_b", static_cast<size_t>(b_bytes));
  ThreadPool& pool = ThreadPool::current();
  const std::span<std::byte* const> task_buffers =
      ws.lanes("grouped_gemm.task", pool.size(), static_cast<size_t>(acc_floats) * 4);

  pool.parallel_for(pack_tasks.size(), [&](size_t task, int) {
    const PackTask& t = pack_tasks[task];
    const Group& g = groups[t.group];
    const pack::PanelRange panels{t.first, t.end};
    if (t.b) {
      pack::pack_panels(
          pack_b, g.b, g.ldb, g.b_order, sizeof(float), panels, nr, g.N, g.K, g.kp,
          [&](int64_t q, int64_t k) { return pb + g.b_at + g.lb(k, q * nr) * bytes; });
    } else {
      pack::pack_panels(
          pack_a, g.a, g.lda, g.a_order, sizeof(float), panels, mr, g.M, g.K, g.kp,
          [&](int64_t q, int64_t k) { return pa + g.a_at + g.la(q * mr, k) * bytes; },
          kernel.pack_a_across[static_cast<int>(source)]);
    }
  });

  pool.parallel_for(tile_tasks.size(), [&](size_t task, int worker) {
    const TileTask& t = tile_tasks[task];
    const Group& g = groups[t.group];
    const int64_t mc = std::min(blk.mc, round_up(g.M, mr));
    const int64_t nc = std::min(blk.nc, round_up(g.N, nr));
    const int64_t rows_here = std::min(mc, g.M - t.i0);
    const int64_t cols_here = std::min(nc, g.N - t.j0);
    float* const acc_memory = reinterpret_cast<float*>(task_buffers[static_cast<size_t>(worker)]);
    if (g.K == 0) {
      // Nothing to multiply: every tile is finished from a zero accumulator (C = beta·C and
      // the epilogue, exactly as a gemm() with K = 0).
      std::fill(acc_memory, acc_memory + mr * nr, 0.0f);
      for (int64_t jp = t.j0; jp < t.j0 + cols_here; jp += nr) {
        for (int64_t ip = t.i0; ip < t.i0 + rows_here; ip += mr) {
          kernel.finish(acc_memory, nr, std::min(mr, g.M - ip), std::min(nr, g.N - jp), alpha, beta,
                        g.c + ip * g.ldc + jp, g.ldc, epilogue, g.epilogue_row + ip, jp);
        }
      }
      return;
    }
    const int64_t kc = std::min(blk.kc, g.kp);
    const int64_t n_kblocks = ceil_div(g.kp, kc);
    const bool one_block = n_kblocks == 1;
    // A tile is finished one micro-kernel call late, as in the driver: reading an accumulator
    // right after the kernel stored it would wait for those stores.
    struct Pending {
      const float* acc = nullptr;
      int64_t ld = 0, rows = 0, cols = 0, i = 0, j = 0;
    } pending;
    auto finish_pending = [&] {
      if (pending.acc == nullptr) return;
      kernel.finish(pending.acc, pending.ld, pending.rows, pending.cols, alpha, beta,
                    g.c + pending.i * g.ldc + pending.j, g.ldc, epilogue,
                    g.epilogue_row + pending.i, pending.j);
      pending.acc = nullptr;
    };
    int64_t calls = 0;
    if (kernel.begin_task != nullptr) kernel.begin_task();
    for (int64_t kb = 0; kb < n_kblocks; ++kb) {
      const int64_t k0 = kb * kc;
      const int64_t kc_here = std::min(kc, g.kp - k0);
      const bool last = kb == n_kblocks - 1;
      const int64_t a_k = g.la.col_part(k0), b_k = g.lb.row_part(k0);
      for (int64_t jp = t.j0; jp < t.j0 + cols_here; jp += nr) {
        const char* b = pb + g.b_at + (g.lb.col_part(jp) + b_k) * bytes;
        for (int64_t ip = t.i0; ip < t.i0 + rows_here; ip += mr) {
          const char* a = pa + g.a_at + (g.la.row_part(ip) + a_k) * bytes;
          float* acc = one_block ? acc_memory + (calls++ & 1) * tile_stride
                                 : acc_memory + (ip - t.i0) * nc + (jp - t.j0);
          const int64_t ld_acc = one_block ? nr : nc;
          kernel.fn(kc_here, a, b, acc, ld_acc, kb > 0);
          if (last) {
            finish_pending();
            pending = {acc, ld_acc, std::min(mr, g.M - ip), std::min(nr, g.N - jp), ip, jp};
          }
        }
      }
    }
    finish_pending();
    if (kernel.end_task != nullptr) kernel.end_task();
  });
}

// The checks both entries share, with what to fix.
void check_offsets(const char* entry, GroupOffsets offsets) {
  const std::string where = std::string(entry) + ": ";
  if (offsets.empty()) {
    throw InputError(where + "offsets must hold groups + 1 entries (got none): pass {0} for no " +
                     "groups, or the offsets route_tokens() computes");
  }
  if (offsets[0] != 0) {
    throw InputError(where + "offsets[0] is " + std::to_string(offsets[0]) +
                     ", not 0: offsets are row numbers of the stacked matrices, the first group " +
                     "starting at row 0");
  }
  for (size_t g = 0; g + 1 < offsets.size(); ++g) {
    if (offsets[g + 1] < offsets[g]) {
      throw InputError(where + "offsets[" + std::to_string(g + 1) +
                       "] = " + std::to_string(offsets[g + 1]) + " is less than offsets[" +
                       std::to_string(g) + "] = " + std::to_string(offsets[g]) +
                       ": rows must be sorted by group, each group's offset at least the last's");
    }
  }
}

void check_at_least(const char* entry, const char* what, int64_t value, const char* need,
                    int64_t minimum) {
  if (value < minimum) {
    throw InputError(std::string(entry) + ": " + what + " = " + std::to_string(value) +
                     " is less than " + need + " = " + std::to_string(minimum) +
                     ": the matrices would overlap or be read past their rows");
  }
}

}  // namespace

void grouped_gemm_rows_with(const MicroKernel& kernel, PackSource source, GroupOffsets offsets,
                            Trans trans_b, int64_t N, int64_t K, float alpha, const float* A,
                            int64_t lda, const float* B, int64_t ldb, int64_t stride_b, float beta,
                            float* C, int64_t ldc, const GemmEpilogue* epilogue) {
  const char* entry = "grouped_gemm_rows";
  check_offsets(entry, offsets);
  check_at_least(entry, "N", N, "zero", 0);
  check_at_least(entry, "K", K, "zero", 0);
  check_at_least(entry, "lda", lda, "K", K);
  check_at_least(entry, "ldc", ldc, "N", N);
  // B_g is stored K × N (kNo) or N × K (kYes).
  const int64_t b_rows = trans_b == Trans::kNo ? K : N, b_cols = trans_b == Trans::kNo ? N : K;
  check_at_least(entry, "ldb", ldb, trans_b == Trans::kNo ? "N" : "K", b_cols);
  if (offsets.size() > 2 && b_rows > 0) {
    check_at_least(entry, "stride_b", stride_b, "the extent of one B, (rows - 1)·ldb + cols",
                   (b_rows - 1) * ldb + b_cols);
  }
  std::vector<Group> groups(offsets.size() - 1);
  for (size_t gi = 0; gi < groups.size(); ++gi) {
    Group& g = groups[gi];
    const int64_t first = offsets[gi];
    g.M = offsets[gi + 1] - first;
    g.N = N;
    g.K = K;
    g.a = A + first * lda;
    g.lda = lda;
    g.a_order = Trans::kNo;
    g.b = B + static_cast<int64_t>(gi) * stride_b;
    g.ldb = ldb;
    g.b_order = trans_b == Trans::kNo ? Trans::kYes : Trans::kNo;  // Y = op(B)ᵀ
    g.c = C + first * ldc;
    g.ldc = ldc;
    g.epilogue_row = first;
  }
  run_grouped(kernel, source, groups, alpha, beta, epilogue);
}

void grouped_gemm_reduce_with(const MicroKernel& kernel, PackSource source, GroupOffsets offsets,
                              int64_t M, int64_t N, float alpha, const float* A, int64_t lda,
                              const float* B, int64_t ldb, float beta, float* C, int64_t ldc,
                              int64_t stride_c) {
  const char* entry = "grouped_gemm_reduce";
  check_offsets(entry, offsets);
  check_at_least(entry, "M", M, "zero", 0);
  check_at_least(entry, "N", N, "zero", 0);
  check_at_least(entry, "lda", lda, "M", M);
  check_at_least(entry, "ldb", ldb, "N", N);
  check_at_least(entry, "ldc", ldc, "N", N);
  if (offsets.size() > 2 && M > 0) {
    check_at_least(entry, "stride_c", stride_c, "the extent of one C, (M - 1)·ldc + N",
                   (M - 1) * ldc + N);
  }
  std::vector<Group> groups(offsets.size() - 1);
  for (size_t gi = 0; gi < groups.size(); ++gi) {
    Group& g = groups[gi];
    const int64_t first = offsets[gi];
    g.K = offsets[gi + 1] - first;
    // An empty group with beta = 1 leaves C_g as it is: no tiles at all.
    g.M = g.K == 0 && beta == 1.0f ? 0 : M;
    g.N = N;
    g.a = A + first * lda;  // op(A_g) = A_gᵀ: Y[i][k] = A[(first + k)·lda + i]
    g.lda = lda;
    g.a_order = Trans::kYes;
    g.b = B + first * ldb;  // op(B_g)ᵀ = B_gᵀ: Y[j][k] = B[(first + k)·ldb + j]
    g.ldb = ldb;
    g.b_order = Trans::kYes;
    g.c = C + static_cast<int64_t>(gi) * stride_c;
    g.ldc = ldc;
  }
  run_grouped(kernel, source, groups, alpha, beta, nullptr);
}

void grouped_gemm_rows(Precision precision, GroupOffsets offsets, Trans trans_b, int64_t N,
                       int64_t K, float alpha, const float* A, int64_t lda, const float* B,
                       int64_t ldb, int64_t stride_b, float beta, float* C, int64_t ldc,
                       const GemmEpilogue* epilogue) {
  const bool bf16 = precision == Precision::kBf16;
  grouped_gemm_rows_with(bf16 ? active_bf16_microkernel() : active_microkernel(),
                         bf16 ? PackSource::kF32ToBf16 : PackSource::kF32, offsets, trans_b, N, K,
                         alpha, A, lda, B, ldb, stride_b, beta, C, ldc, epilogue);
}

void grouped_gemm_reduce(Precision precision, GroupOffsets offsets, int64_t M, int64_t N,
                         float alpha, const float* A, int64_t lda, const float* B, int64_t ldb,
                         float beta, float* C, int64_t ldc, int64_t stride_c) {
  const bool bf16 = precision == Precision::kBf16;
  grouped_gemm_reduce_with(bf16 ? active_bf16_microkernel() : active_microkernel(),
                           bf16 ? PackSource::kF32ToBf16 : PackSource::kF32, offsets, M, N, alpha,
                           A, lda, B, ldb, beta, C, ldc, stride_c);
}

}  // namespace nanogpt
