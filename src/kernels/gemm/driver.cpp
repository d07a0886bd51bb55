#include "kernels/gemm/driver.hpp"

#include <algorithm>
#include <atomic>
#include <bit>
#include <new>
#include <span>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "kernels/autotune.hpp"
#include "kernels/gemm/blocking_memo.hpp"
#include "kernels/gemm/pack_panels.hpp"
#include "kernels/gemm/packed_b.hpp"
#include "kernels/target.hpp"
#include "runtime/aligned_memory.hpp"
#include "runtime/error.hpp"
#include "runtime/integer_math.hpp"
#include "runtime/thread_pool.hpp"
#include "runtime/workspace.hpp"

namespace nanogpt {

namespace {

// Packed op(B) is kept to about this many bytes per superblock of columns: it is read by every
// row block, so it should stay in the (shared) last-level cache.
constexpr int64_t kPackedBBytes = int64_t{4} << 20;

// Per-panel packing state, n flags at `memory` (from the workspace), all set empty.
std::atomic<uint8_t>* empty_flags(std::byte* memory, size_t n) {
  auto* flags = reinterpret_cast<std::atomic<uint8_t>*>(memory);
  for (size_t i = 0; i < n; ++i) new (&flags[i]) std::atomic<uint8_t>(0);
  return flags;
}

constexpr uint8_t kEmpty = 0, kPacking = 1, kReady = 2;

// Claims the panels of [begin, end) that no one has claimed, packs them with
// pack(claimed, count), then waits for those others claimed. `claimed` has room for end − begin.
// one_at_a_time: claim and pack each panel before claiming the next, so that tasks needing the
// same panels (a short A shared by every task of a row block) share the packing instead of one
// packing them all while the others wait. Used for A from an i-major source (panels packed
// whole, not a chunk of k across all of them), and from a k-major one where a row block's
// tasks run side by side (run_product). Not for B in general: measured (bench/gemm_call_cost,
// fp32, 2 threads, 256³) it made a task read half its B panels from the other core's cache,
// 193 → 305 µs a call, where A gains (bf16 256³: 207 → 101 µs).
template <class PackPanels>
void ensure_packed(std::atomic<uint8_t>* flags, int64_t begin, int64_t end, int64_t* claimed,
                   bool one_at_a_time, const PackPanels& pack) {
  size_t count = 0;
  for (int64_t p = begin; p < end; ++p) {
    uint8_t expected = kEmpty;
    if (flags[p].load(std::memory_order_relaxed) == kEmpty &&
        flags[p].compare_exchange_strong(expected, kPacking, std::memory_order_acquire)) {
      if (one_at_a_time) {
        pack(&p, 1);
        flags[p].store(kReady, std::memory_order_release);
      } else {
        claimed[count++] = p;
      }
    }
  }
  if (count > 0) {
    pack(claimed, count);
    for (size_t i = 0; i < count; ++i) flags[claimed[i]].store(kReady, std::memory_order_release);
  }
  for (int64_t p = begin; p < end; ++p) {
    for (int spins = 0; flags[p].load(std::memory_order_acquire) != kReady; ++spins) {
      // The packer is running (it waits for nothing), so this ends; yield when oversubscribed.
      if (spins < 1000) {
        spin_pause();
      } else {
        std::this_thread::yield();
      }
    }
  }
}

// A superblock of packed B above this size is packed one panel at a time (run_product).
constexpr int64_t kSharedBPanelsBytes = int64_t{1} << 20;

// A task's packed panels over all of K above this size (beyond a core's L2) are packed one K
// block at a time (run_product).
constexpr int64_t kTaskPanelsBytes = int64_t{1} << 20;

// How the autotuner's keys name an operand's storage.
const char* source_name(PackSource s) {
  return s == PackSource::kF32 ? "f32" : s == PackSource::kBf16 ? "bf16" : "f32>bf16";
}

Trans flip(Trans t) {
  return t == Trans::kNo ? Trans::kYes : Trans::kNo;
}

// The source of Y's columns from k on (Y as pack_panels reads it: Y[i][k] = src[i·ld + k] when
// order is kNo, src[k·ld + i] when kYes).
const void* k_shifted(const void* src, int64_t ld, Trans order, int64_t source_bytes, int64_t k) {
  return static_cast<const char*>(src) + (order == Trans::kNo ? k : k * ld) * source_bytes;
}

void check_dimensions(int64_t M, int64_t N, int64_t K) {
  for (auto [name, value] : {std::pair{"M", M}, std::pair{"N", N}, std::pair{"K", K}}) {
    if (value < 0) {
      throw InputError(std::string("gemm: ") + name + " = " + std::to_string(value) +
                       " is negative: M, N and K count rows and columns of op(A) (M × K) and " +
                       "op(B) (K × N); pass 0 for an empty product");
    }
  }
}

// An epilogue that keeps only the bf16 copy (GemmEpilogue::c_bf16_only) has nothing to scale
// and no C to write: say so rather than read or write through a null C.
void check_epilogue(float beta, const float* C, const GemmEpilogue* epilogue) {
  if (epilogue == nullptr) return;
  if (epilogue->relu_squared_output != nullptr && epilogue->relu_squared_output_bf16 != nullptr) {
    throw std::invalid_argument(
        "gemm: an epilogue reads the relu² output in fp32 or in bf16, not both: set "
        "relu_squared_output or relu_squared_output_bf16");
  }
  if (!epilogue->c_bf16_only) return;
  if (epilogue->c_bf16 == nullptr || C != nullptr || beta != 0.0f) {
    throw std::invalid_argument(
        "gemm: an epilogue with c_bf16_only writes c_bf16 alone: give it c_bf16, a null C and "
        "beta = 0 (got c_bf16 " +
        std::string(epilogue->c_bf16 == nullptr ? "null" : "set") + ", C " +
        (C == nullptr ? "null" : "set") + ", beta " + std::to_string(beta) + ")");
  }
}

void check_packed_b(const MicroKernel& kernel, const PackedB& b, int64_t N) {
  if (b.kernel == nullptr || b.kernel->fn != kernel.fn || b.kernel->mr != kernel.mr ||
      b.kernel->nr != kernel.nr) {
    throw std::invalid_argument(std::string("gemm: B packed for the ") +
                                (b.kernel != nullptr ? b.kernel->isa : "(no)") +
                                " kernel was given to a product on the " + kernel.isa +
                                " kernel; pack it for the kernel that runs the product");
  }
  if (N < 0 || N > b.N) {
    throw std::invalid_argument("gemm: a product of " + std::to_string(N) +
                                " columns was asked of a packed B of " + std::to_string(b.N) +
                                "; it reads at most all of them");
  }
}

// The product, with op(B) either packed here (packed_b null) or given packed (B unused then).
void run_product(const MicroKernel& kernel, const GemmBlocking& blocking, PackSources sources,
                 Trans trans_a, Trans trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                 const void* A, int64_t lda, const void* B, int64_t ldb, const PackedB* packed_b,
                 float beta, float* C, int64_t ldc, const GemmEpilogue* epilogue) {
  check_dimensions(M, N, K);
  check_epilogue(beta, C, epilogue);
  // Empty products as BLAS defines them: no C at all, or C = beta·C with nothing to add.
  if (M == 0 || N == 0 || (K == 0 && beta == 1.0f && epilogue == nullptr)) return;
  const PanelPackFn pack_a = kernel.pack_a[static_cast<int>(sources.a)];
  const PanelPackFn pack_b = kernel.pack_b[static_cast<int>(sources.b)];
  const PanelsAcrossPackFn pack_a_across = kernel.pack_a_across[static_cast<int>(sources.a)];
  if (pack_a == nullptr || pack_b == nullptr) {
    throw std::invalid_argument(std::string("gemm: the ") + kernel.isa +
                                " kernel cannot read this operand type");
  }
  const GemmBlocking blk = normalized(blocking, kernel, M, N, K);
  const int64_t mr = kernel.mr, nr = kernel.nr, bytes = kernel.packed_bytes;
  const int64_t a_bytes = sources.a == PackSource::kBf16 ? 2 : 4;
  const int64_t b_bytes = sources.b == PackSource::kBf16 ? 2 : 4;
  // K = 0 packs one all-zero k step: the tiles come out zero and are finished as usual
  // (C = beta·C, then the epilogue).
  const int64_t kp = round_up(std::max<int64_t>(K, 1), kernel.k_step);
  const int64_t mp = round_up(M, mr);
  const int64_t m_panels = mp / mr;
  // A bf16, k-contiguous A whose K fills whole k steps is read in place by a kernel that can
  // (fn_a_rows: AMX tiles are its rows as stored, AVX512-BF16 broadcasts each pair from its
  // row); then only a last, partial panel is packed.
  // Rows [0, a_packed_row0) are read in place; the packed buffer holds the rows from there.
  const bool a_in_place = kernel.fn_a_rows != nullptr && sources.a == PackSource::kBf16 &&
                          trans_a == Trans::kNo && K > 0 && K % kernel.k_step == 0;
  const int64_t a_packed_row0 = a_in_place ? M / mr * mr : 0;
  const int64_t a_packed_rows = mp - a_packed_row0;
  const int64_t n_kblocks = ceil_div(kp, blk.kc);

  // Superblock width: all of N if its packed panels fit kPackedBBytes, else a multiple of nc
  // (B given packed too: a superblock of it then stays in cache while every row block reads it).
  int64_t ns = std::max<int64_t>(kPackedBBytes / (kp * bytes) / blk.nc, 1) * blk.nc;
  if (ns >= N) ns = N;
  // K in passes: where even one nc wide superblock of B over all of K passes kPackedBBytes
  // (the speedrun head's input gradient, K = 50304: 51 MB), every row block would stream it
  // from memory, and A packed whole would take M·K values of scratch (206 MB). Then K is taken
  // in passes of whole kc blocks whose A and B panels fit: each pass packs its part of A once
  // for all superblocks and its part of each superblock's B once for all row blocks, and the
  // accumulators of all of C carry from one pass to the next. Every tile still adds its kc
  // blocks in order, so the bits are those of one pass.
  int64_t kq = kp;
  if (n_kblocks > 1) {
    const int64_t b_bytes_per_k = round_up(ns, nr) * bytes;
    if (kp * b_bytes_per_k > kPackedBBytes) {
      kq = std::min(kp, std::max<int64_t>(kPackedBBytes / b_bytes_per_k / blk.kc, 1) * blk.kc);
    }
  }
  const bool in_passes = kq < kp;
  const int64_t ns_p = packed_b != nullptr ? 0 : round_up(ns, nr);

  // Scratch from the caller's workspace (runtime/workspace.hpp): the packed operands and
  // their flags for the calling thread, and one task buffer per pool worker, passed in below.
  Workspace& ws = Workspace::current();
  char* pa = a_packed_rows == 0
                 ? nullptr
                 : ws.get<char>("gemm.packed_a", static_cast<size_t>(a_packed_rows * kq * bytes));
  char* pb = ws.get<char>("gemm.packed_b", static_cast<size_t>(ns_p * kq * bytes));
  // One packing flag per panel and K range packed at once (pack_kc, below: at most a pass's
  // K blocks).
  const int64_t max_pass_kblocks = ceil_div(kq, blk.kc);
  std::byte* a_flag_memory =
      ws.get("gemm.a_flags", static_cast<size_t>(m_panels * max_pass_kblocks));
  const int64_t b_panels_per_superblock = ceil_div(ns, nr);
  std::byte* b_flag_memory =
      packed_b != nullptr
          ? nullptr
          : ws.get("gemm.b_flags", static_cast<size_t>(b_panels_per_superblock * max_pass_kblocks));
  // With passes: the accumulators of all of C (whole tiles: mp rows, N rounded up to nr).
  const int64_t ld_pass_acc = round_up(N, nr);
  float* const pass_acc =
      in_passes ? ws.get<float>("gemm.pass_accumulators", static_cast<size_t>(mp * ld_pass_acc))
                : nullptr;

  // A task's buffer: the accumulator (two tiles taken in turn when K is a single block, each
  // finished while hot in L1, else the task's whole MC×NC block, carried from one K block to the
  // next; none with passes), then the row parts of its A micro-panels, then the panels it
  // claims to pack.
  const bool one_block = n_kblocks == 1;
  // The second tile starts 4 KiB + 256 B after the first: 4 KiB apart, loads from one would
  // falsely alias stores to the other (same low address bits) and wait for them.
  const int64_t tile_stride = mr * nr + 64;
  const int64_t acc_floats =
      in_passes ? 0 : round_up(one_block ? 2 * tile_stride : blk.mc * blk.nc, 16);
  const int64_t task_panels = std::max(blk.mc / mr, blk.nc / nr);
  ThreadPool& pool = ThreadPool::current();
  const std::span<std::byte* const> task_buffers =
      ws.lanes("gemm.task", pool.size(), static_cast<size_t>(acc_floats * 4 + 2 * task_panels * 8));

  // A C larger than this (beyond the caches) and only written is stored non-temporally.
  constexpr int64_t kStreamBytes = int64_t{8} << 20;
  // The bf16 copy, when there is one, streams too: its rows must start on 64 bytes as well.
  const bool copy_aligned =
      epilogue == nullptr || epilogue->c_bf16 == nullptr ||
      (epilogue->ld_c_bf16 % 32 == 0 && reinterpret_cast<uintptr_t>(epilogue->c_bf16) % 64 == 0);
  const bool stream_c = kernel.stream != nullptr && beta == 0.0f && M * N * 4 >= kStreamBytes &&
                        ldc % 16 == 0 && reinterpret_cast<uintptr_t>(C) % 64 == 0 && copy_aligned;
  // Without an epilogue, or with an addend alone (and not streamed), a tile's last K block
  // finishes from the registers.
  const bool addend_only = epilogue != nullptr && epilogue->addend_only();
  const bool finish_in_kernel =
      kernel.fn_finishing != nullptr && (epilogue == nullptr || addend_only) && !stream_c;
  // Where finishing would copy the sum unchanged, a kernel that can stores a whole tile's sum
  // in C itself (fn_to_c: AMX's tile stores), skipping the accumulator's round trip.
  const bool sum_to_c = kernel.fn_to_c != nullptr && alpha == 1.0f && beta == 0.0f &&
                        epilogue == nullptr && !stream_c;
  const int64_t m_blocks = ceil_div(M, blk.mc);
  for (int64_t q0 = 0; q0 < kp; q0 += kq) {
    const int64_t q_len = std::min(kq, kp - q0);  // a multiple of kc but for the last pass
    const int64_t q_valid = std::min(q_len, K - q0);
    // Packed rows are counted from a_packed_row0 (a layout of at least one panel, so that its
    // column part exists when every row is read in place).
    const layout::Layout la = kernel.a_layout(std::max(a_packed_rows, mr), q_len);
    if (!la.separable()) throw std::invalid_argument("gemm: packed layouts must be separable");
    const int64_t pass_kblocks = ceil_div(q_len, blk.kc);
    // A task packs the panels it reads (its rows of A, its columns of B, unless B came packed)
    // over all of the pass's K before its first K block, unless they would not stay in a
    // core's L2 (a weight gradient over 8192 tokens: 2 MiB of A and as much of B per task):
    // then one K block of them at a time, just before that block's products, so they go from
    // the source through the core's caches into the micro-kernel instead of to memory and back.
    // Panels are shared either way (ensure_packed): whichever task first needs a panel's K
    // range packs it. (Per K block where they do fit, the threads' hand-offs only add waits.)
    const int64_t task_panel_bytes = (blk.mc + (packed_b != nullptr ? 0 : blk.nc)) * q_len * bytes;
    const int64_t pack_kc = task_panel_bytes > kTaskPanelsBytes ? blk.kc : q_len;
    const int64_t pack_blocks = ceil_div(q_len, pack_kc);
    std::atomic<uint8_t>* a_flags =
        empty_flags(a_flag_memory, static_cast<size_t>(m_panels * pack_blocks));
    const void* const a_pass = k_shifted(A, lda, trans_a, a_bytes, q0);
    for (int64_t s0 = 0; s0 < N; s0 += ns) {
      const int64_t s_cols = std::min(ns, N - s0);
      // Packed here: the superblock's own panels over this pass's k; given packed: all of B's,
      // from column s0 and k = q0.
      const layout::Layout lb =
          packed_b != nullptr ? packed_b->layout : kernel.b_layout(q_len, round_up(s_cols, nr));
      const int64_t lb_col0 = packed_b != nullptr ? s0 : 0;
      const int64_t lb_k0 = packed_b != nullptr ? q0 : 0;
      const char* const b_panels =
          packed_b != nullptr ? reinterpret_cast<const char*>(packed_b->data.data()) : pb;
      const int64_t superblock_panels = ceil_div(s_cols, nr);
      std::atomic<uint8_t>* b_flags =
          packed_b != nullptr
              ? nullptr
              : empty_flags(b_flag_memory, static_cast<size_t>(superblock_panels * pack_blocks));
      // B's panels are counted from the superblock's first column and the pass's first k.
      const void* const b_pass =
          packed_b != nullptr ? nullptr
                              : k_shifted(static_cast<const char*>(B) +
                                              (trans_b == Trans::kNo ? s0 : s0 * ldb) * b_bytes,
                                          ldb, flip(trans_b), b_bytes, q0);
      const int64_t n_blocks = ceil_div(s_cols, blk.nc);
      // B's panels are claimed as a set (ensure_packed), unless every task reads all of them
      // (one column block) and they are too large to stay in one core's L2 anyway (a weight's
      // gradient over 8192 tokens: 4 MiB): then the row blocks' tasks pack them together, one
      // at a time, instead of one task packing them all while the others wait. With several
      // column blocks the threads already pack B apart, and a set packs its source's rows
      // several panels wide, which one at a time would not.
      const bool b_one_at_a_time = m_blocks > 1 && n_blocks == 1 &&
                                   round_up(s_cols, nr) * q_len * bytes > kSharedBPanelsBytes;
      // A's panels likewise one at a time where the tasks of a row block run side by side (more
      // than one column block), so that they pack its panels together instead of one waiting for
      // the other: also from a k-major source (a weight gradient's dYᵀ), whose panels are packed
      // a K block at a time and needed at once by both, provided a panel is at least a cache
      // line of each source row (AMX's 32 rows; not the fp32 kernel's 8 floats, whose panels
      // would each fetch every line again). Where a row block is one task, a set packs its
      // source's rows several panels wide. Measured (scratch program, 2 threads, bf16 on AMX,
      // weight-gradient shapes over 8192 tokens, cache evicted between calls, median of 20):
      // 256 × 1024 5.3 → 4.4–4.8 ms, 256 × 256 2.2 → 1.9; one at a time with one column block
      // slowed 1024 × 256 4.4 → 5.0–5.4 and 768 × 256 3.4 → 3.8–4.0, and with the fp32
      // kernel's panels speedrun's c_fc weight gradient (3072 × 768 × 1024) 274–280 → 255–258
      // GFLOP/s (build/gemm_vs_peers).
      const bool a_one_at_a_time =
          trans_a == Trans::kNo ||
          (n_blocks > 1 && mr * a_bytes >= static_cast<int64_t>(kCacheLine));
      // Tasks are numbered down the columns of blocks: the pool's threads start on contiguous
      // shares of them, so each packs B panels of its own, and the row blocks' A panels,
      // needed by all at once, are shared out panel by panel (ensure_packed). With B given
      // packed, A to pack and the superblock's B small enough to stay in a core's L2, they are
      // numbered along the rows instead: a thread's share then keeps to its own row blocks,
      // whose A panels it packs alone and reads from its own cache, and it reads all of that B.
      // Measured (scratch program, 2 threads, bf16, A transposed, B packed, best / median of
      // 2,000 calls): 256 × 256 × 512 61.7 / 79.7 → 43.2 / 50.3 µs, 256 × 1,024 × 512 234 / 260
      // → 157 / 219 µs. Along the rows with an A read in place and speedrun's packed weights
      // (1.2–4.7 MB) took build/gemm_vs_peers' speedrun geomean from 1.09x to 1.01–1.07x.
      const bool along_rows = packed_b != nullptr && !a_in_place &&
                              round_up(s_cols, nr) * q_len * bytes <= kTaskPanelsBytes;
      pool.parallel_for(static_cast<size_t>(m_blocks * n_blocks), [&](size_t task, int worker) {
        const int64_t number = static_cast<int64_t>(task);
        const int64_t i0 = (along_rows ? number / n_blocks : number % m_blocks) * blk.mc;
        const int64_t j0 =
            (along_rows ? number % n_blocks : number / m_blocks) * blk.nc;  // in superblock
        const int64_t rows = std::min(blk.mc, M - i0);
        const int64_t cols = std::min(blk.nc, s_cols - j0);
        float* const acc_memory =
            reinterpret_cast<float*>(task_buffers[static_cast<size_t>(worker)]);
        int64_t* const a_rows = reinterpret_cast<int64_t*>(acc_memory + acc_floats);
        int64_t* const claimed = a_rows + task_panels;

        // Micro-panel addresses from the layouts, whose offsets separate into a row part and a
        // column part: tabulated per task so the loops below only add.
        for (int64_t ip = i0, t = 0; ip < i0 + rows; ip += mr, ++t) {
          a_rows[t] = ip < a_packed_row0 ? 0 : la.row_part(ip - a_packed_row0);
        }
        // A tile is finished one micro-kernel call late: reading an accumulator right after the
        // kernel stored it (AMX tile stores especially) would wait for those stores to land.
        struct Pending {
          const float* acc = nullptr;
          int64_t ld = 0, rows = 0, cols = 0, i = 0, j = 0;
          float* c = nullptr;
        } pending;
        auto finish_pending = [&] {
          if (pending.acc == nullptr) return;
          if (stream_c && pending.cols == nr && (pending.j % 16) == 0) {
            kernel.stream(pending.acc, pending.ld, pending.rows, pending.cols, alpha, beta,
                          pending.c, ldc, epilogue, pending.i, pending.j);
            pending.acc = nullptr;
            return;
          }
          kernel.finish(pending.acc, pending.ld, pending.rows, pending.cols, alpha, beta, pending.c,
                        ldc, epilogue, pending.i, pending.j);
          pending.acc = nullptr;
        };
        int64_t calls = 0;
        if (kernel.begin_task != nullptr) kernel.begin_task();
        for (int64_t kb = 0; kb < pass_kblocks; ++kb) {
          const int64_t k0 = kb * blk.kc;  // within the pass
          const int64_t kc = std::min(blk.kc, q_len - k0);
          const bool first = q0 + k0 == 0, last = q0 + k0 + kc == kp;
          if (k0 % pack_kc == 0) {
            const int64_t pk_len = std::min(pack_kc, q_len - k0);
            const int64_t k_valid = std::clamp<int64_t>(q_valid - k0, 0, pk_len);
            const int64_t block = k0 / pack_kc;
            ensure_packed(
                a_flags + block * m_panels, std::max(i0, a_packed_row0) / mr,
                ceil_div(i0 + rows, mr), claimed, a_one_at_a_time, [&](const int64_t* p, size_t n) {
                  pack::pack_panels(
                      pack_a, k_valid > 0 ? k_shifted(a_pass, lda, trans_a, a_bytes, k0) : a_pass,
                      lda, trans_a, a_bytes, std::span<const int64_t>(p, n), mr, M, k_valid, pk_len,
                      [&](int64_t q, int64_t k) {
                        return pa + la(q * mr - a_packed_row0, k0 + k) * bytes;
                      },
                      pack_a_across);
                });
            if (b_flags != nullptr) {
              ensure_packed(
                  b_flags + block * superblock_panels, j0 / nr, ceil_div(j0 + cols, nr), claimed,
                  b_one_at_a_time, [&](const int64_t* p, size_t n) {
                    pack::pack_panels(
                        pack_b,
                        k_valid > 0 ? k_shifted(b_pass, ldb, flip(trans_b), b_bytes, k0) : b_pass,
                        ldb, flip(trans_b), b_bytes, std::span<const int64_t>(p, n), nr, N - s0,
                        k_valid, pk_len,
                        [&](int64_t q, int64_t k) { return pb + lb(k0 + k, q * nr) * bytes; });
                  });
            }
          }
          const int64_t a_k = la.col_part(k0), b_k = lb.row_part(lb_k0 + k0);
          for (int64_t jp = j0; jp < j0 + cols; jp += nr) {
            const char* b = b_panels + (lb.col_part(lb_col0 + jp) + b_k) * bytes;
            const int64_t tile_cols = std::min(nr, s_cols - jp);
            for (int64_t ip = i0, t = 0; ip < i0 + rows; ip += mr, ++t) {
              const bool a_rows_here = ip < a_packed_row0;
              const char* a = a_rows_here
                                  ? static_cast<const char*>(a_pass) + (ip * lda + k0) * a_bytes
                                  : pa + (a_rows[t] + a_k) * bytes;
              const int64_t tile_rows = std::min(mr, M - ip);
              const bool to_c = last && sum_to_c && tile_rows == mr && tile_cols == nr;
              // With one K block the finished-late tiles take the two accumulators in turn; a
              // tile stored into C takes none (the next one's: it neither reads nor writes it),
              // so the pending tile's is not overwritten before it is finished.
              float* acc = in_passes   ? pass_acc + ip * ld_pass_acc + s0 + jp
                           : one_block ? acc_memory + ((to_c ? calls : calls++) & 1) * tile_stride
                                       : acc_memory + (ip - i0) * blk.nc + (jp - j0);
              const int64_t ld_acc = in_passes ? ld_pass_acc : one_block ? nr : blk.nc;
              float* c = C != nullptr ? C + ip * ldc + s0 + jp : nullptr;
              if (to_c) {
                kernel.fn_to_c(kc, a, a_rows_here ? lda * a_bytes : 0, b, acc, ld_acc, !first, c,
                               ldc);
                continue;
              }
              if (last && finish_in_kernel) {
                TileFinish finish{alpha, beta, c, ldc, tile_rows, tile_cols};
                if (addend_only) {
                  finish.addend = epilogue->addend + ip * epilogue->ld_addend + s0 + jp;
                  finish.ld_addend = epilogue->ld_addend;
                  finish.addend_scale = epilogue->addend_scale;
                }
                kernel.fn_finishing(kc, a, a_rows_here ? lda * a_bytes : 0, b, acc, ld_acc, !first,
                                    finish);
                continue;
              }
              if (a_rows_here) {
                kernel.fn_a_rows(kc, a, lda * a_bytes, b, acc, ld_acc, !first);
              } else {
                kernel.fn(kc, a, b, acc, ld_acc, !first);
              }
              if (last) {
                finish_pending();
                pending = {acc, ld_acc, tile_rows, tile_cols, ip, s0 + jp, c};
              }
            }
          }
        }
        finish_pending();
        // Non-temporal stores are weakly ordered: make them visible before the task counts as
        // done.
        if (stream_c) _mm_sfence();
        if (kernel.end_task != nullptr) kernel.end_task();
      });
    }
  }
}

// chosen_blocking(), timing the candidates with B given packed when packed_b is not null.
GemmBlocking blocking_for(const MicroKernel& kernel, PackSources sources, Trans trans_a,
                          Trans trans_b, int64_t M, int64_t N, int64_t K, const void* A,
                          int64_t lda, const void* B, int64_t ldb, const PackedB* packed_b,
                          float beta, const float* C, int64_t ldc) {
  const int threads = ThreadPool::current().size();
  const GemmBlocking fallback = default_blocking(kernel, M, N, K, threads);
  // Below this many multiply-adds the call is over before timing could pay off (K = 0: none).
  constexpr double kTuneMinWork = double{1 << 24};
  if (M <= 0 || N <= 0 || static_cast<double>(M) * N * K < kTuneMinWork) {
    return fallback;
  }
  // The choice a recent call made for the same question, without the lookup's cost.
  thread_local BlockingMemo memo;
  const BlockingQuery query =
      blocking_query(AutotuneCache::current().id(), kernel, sources, trans_a, trans_b,
                     packed_b != nullptr, threads, M, N, K);
  if (const GemmBlocking* known = memo.find(query)) return *known;
  TuneKey key;
  key.op = std::string("gemm_") + (trans_a == Trans::kNo ? "n" : "t") +
           (trans_b == Trans::kNo ? "n" : "t") + "_threads" + std::to_string(threads);
  // Heights are keyed by the power of two at or above them: a model's cached forwards see
  // every height from 1 to thousands (each prompt length, each batch of cases, each round of a
  // batched decode as samples finish), and timing each new one (~1 s of candidates) cost
  // evaluation runs far more than the products; heights within a factor of two share their
  // blocking (all candidates give the same bits). So the candidates are the bucket's height's,
  // each fitted to this height: were their names this height's, a bucket's cached choice would
  // miss at its other heights and every new height would time the candidates again (and
  // rewrite the cache file), as a batched decode, whose height shrinks round by round, did at
  // nearly every round.
  key.M = static_cast<int64_t>(std::bit_ceil(static_cast<uint64_t>(M)));
  const std::vector<GemmBlocking> candidates = blocking_candidates(kernel, key.M, N, K, threads);
  std::vector<std::string> names;
  for (const GemmBlocking& b : candidates) names.push_back(b.name());
  const auto fitted = [&](size_t i) { return normalized(candidates[i], kernel, M, N, K); };
  key.N = N;
  key.K = K;
  key.dtype = sources.a == sources.b
                  ? source_name(sources.a)
                  : std::string(source_name(sources.a)) + "," + source_name(sources.b);
  if (packed_b != nullptr) key.dtype += ",packed_b";
  key.isa = kernel.isa;
  const size_t chosen = autotune(key, names, 0, [&](size_t i) {
    // Candidates write a scratch C (holding the caller's values when beta reads them), so
    // timing never changes the caller's C.
    std::vector<float> scratch(static_cast<size_t>(M * N), 0.0f);
    if (beta != 0.0f) {
      for (int64_t r = 0; r < M; ++r)
        std::copy(C + r * ldc, C + r * ldc + N, scratch.data() + r * N);
    }
    const GemmBlocking blocking = fitted(i);
    // One timed run after the warm-up per round: autotune() takes the fastest of its
    // kTuneRounds interleaved rounds, which spreads the samples over the host's changes.
    return time_best_of(
        [&] {
          run_product(kernel, blocking, sources, trans_a, trans_b, M, N, K, 1.0f, A, lda, B, ldb,
                      packed_b, beta, scratch.data(), N, nullptr);
        },
        1);
  });
  const GemmBlocking blocking = chosen < candidates.size() ? fitted(chosen) : fallback;
  memo.remember(query, blocking);
  return blocking;
}

}  // namespace

void gemm_run(const MicroKernel& kernel, const GemmBlocking& blocking, PackSources sources,
              Trans trans_a, Trans trans_b, int64_t M, int64_t N, int64_t K, float alpha,
              const void* A, int64_t lda, const void* B, int64_t ldb, float beta, float* C,
              int64_t ldc, const GemmEpilogue* epilogue) {
  run_product(kernel, blocking, sources, trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, nullptr,
              beta, C, ldc, epilogue);
}

void gemm_run_packed_b(const MicroKernel& kernel, const GemmBlocking& blocking, PackSource a_source,
                       Trans trans_a, int64_t M, int64_t N, float alpha, const void* A, int64_t lda,
                       const PackedB& B, float beta, float* C, int64_t ldc,
                       const GemmEpilogue* epilogue) {
  check_packed_b(kernel, B, N);
  run_product(kernel, blocking, {a_source, B.source}, trans_a, Trans::kNo, M, N, B.K, alpha, A, lda,
              nullptr, 0, &B, beta, C, ldc, epilogue);
}

GemmBlocking chosen_blocking(const MicroKernel& kernel, PackSources sources, Trans trans_a,
                             Trans trans_b, int64_t M, int64_t N, int64_t K, const void* A,
                             int64_t lda, const void* B, int64_t ldb, float beta, const float* C,
                             int64_t ldc) {
  return blocking_for(kernel, sources, trans_a, trans_b, M, N, K, A, lda, B, ldb, nullptr, beta, C,
                      ldc);
}

void gemm_dispatch(const MicroKernel& kernel, PackSources sources, Trans trans_a, Trans trans_b,
                   int64_t M, int64_t N, int64_t K, float alpha, const void* A, int64_t lda,
                   const void* B, int64_t ldb, float beta, float* C, int64_t ldc,
                   const GemmEpilogue* epilogue) {
  check_dimensions(M, N, K);  // before the autotuner times anything
  const GemmBlocking blocking =
      chosen_blocking(kernel, sources, trans_a, trans_b, M, N, K, A, lda, B, ldb, beta, C, ldc);
  gemm_run(kernel, blocking, sources, trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C,
           ldc, epilogue);
}

}  // namespace nanogpt

namespace nanogpt {

void gemm_dispatch_packed_b(PackSource a_source, Trans trans_a, int64_t M, int64_t N, float alpha,
                            const void* A, int64_t lda, const PackedB& B, float beta, float* C,
                            int64_t ldc, const GemmEpilogue* epilogue) {
  if (B.kernel == nullptr) {
    throw std::invalid_argument("gemm: a product was given a packed B that holds nothing");
  }
  check_packed_b(*B.kernel, B, N);
  check_dimensions(M, N, B.K);
  const MicroKernel& kernel = *B.kernel;
  const GemmBlocking blocking = blocking_for(kernel, {a_source, B.source}, trans_a, Trans::kNo, M,
                                             N, B.K, A, lda, nullptr, 0, &B, beta, C, ldc);
  gemm_run_packed_b(kernel, blocking, a_source, trans_a, M, N, alpha, A, lda, B, beta, C, ldc,
                    epilogue);
}

void pack_b_operand(const MicroKernel& kernel, PackSource source, Trans trans_b, int64_t K,
                    int64_t N, const void* B, int64_t ldb, PackedB& out) {
  check_dimensions(0, N, K);
  const PanelPackFn pack = kernel.pack_b[static_cast<int>(source)];
  if (pack == nullptr) {
    throw std::invalid_argument(std::string("gemm: the ") + kernel.isa +
                                " kernel cannot read this operand type");
  }
  const int64_t nr = kernel.nr, bytes = kernel.packed_bytes;
  const int64_t kp = round_up(std::max<int64_t>(K, 1), kernel.k_step);
  const int64_t panels = ceil_div(N, nr);
  out.kernel = &kernel;
  out.source = source;
  out.K = K;
  out.N = N;
  out.kp = kp;
  out.layout = kernel.b_layout(kp, panels * nr);
  out.data.resize(static_cast<size_t>(panels * nr * kp * bytes));
  if (panels == 0) return;
  const int64_t b_bytes = source == PackSource::kBf16 ? 2 : 4;
  char* const packed = reinterpret_cast<char*>(out.data.data());
  const layout::Layout& lb = out.layout;
  // A task packs a few panels (about 64 KiB of them): each panel is packed by one thread, the
  // same bytes whatever the thread count.
  const int64_t per_task = std::max<int64_t>(1, (int64_t{64} << 10) / (nr * kp * bytes));
  ThreadPool::current().parallel_for(
      static_cast<size_t>(ceil_div(panels, per_task)), [&](size_t task, int) {
        const int64_t first = static_cast<int64_t>(task) * per_task;
        const pack::PanelRange range{first, std::min(panels, first + per_task)};
        pack::pack_panels(pack, B, ldb, flip(trans_b), b_bytes, range, nr, N, K, kp,
                          [&](int64_t q, int64_t k) { return packed + lb(k, q * nr) * bytes; });
      });
}

}  // namespace nanogpt
