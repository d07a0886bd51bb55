// The GEMM driver: cache blocking, packing and the macro-kernel around a micro-kernel.
#include "kernels/gemm.hpp"

#include <algorithm>
#include <vector>

#include "kernels/gemm/microkernel.hpp"
#include "runtime/thread_pool.hpp"

namespace nanogpt {

namespace {

// Cache blocks: a KC×NR panel of B stays in L1 while an MC×KC block of A sits in L2. MC and
// NC are multiples of every kernel's MR and NR.
constexpr int64_t kMC = 96;
constexpr int64_t kKC = 256;
constexpr int64_t kNC = 512;
constexpr int64_t kMaxTile = 8 * 32;  // largest MR×NR of any kernel
// Column micro-panels per compute task: enough work per task to amortise the hand-out.
constexpr int64_t kPanelsPerTask = 4;

inline float at(const float* X, int64_t ld, Trans t, int64_t r, int64_t c) {
  return t == Trans::kNo ? X[r * ld + c] : X[c * ld + r];
}

// op(A)[i0:i0+mc, k0:k0+kc] as micro-panels of mr rows: panel p holds, for each k, the mr
// values of rows p·mr.. (zero past mc).
void pack_a(const float* A, int64_t lda, Trans ta, int64_t i0, int64_t mc, int64_t k0, int64_t kc,
            int64_t mr, float* out) {
  for (int64_t p = 0; p < mc; p += mr) {
    const int64_t rows = std::min(mr, mc - p);
    if (ta == Trans::kYes && rows == mr) {
      // Transposed A: the mr values for one k are contiguous in memory.
      for (int64_t k = 0; k < kc; ++k) {
        const float* src = A + (k0 + k) * lda + i0 + p;
        for (int64_t r = 0; r < mr; ++r) *out++ = src[r];
      }
      continue;
    }
    for (int64_t k = 0; k < kc; ++k) {
      for (int64_t r = 0; r < mr; ++r)
        *out++ = r < rows ? at(A, lda, ta, i0 + p + r, k0 + k) : 0.0f;
    }
  }
}

// op(B)[k0:k0+kc, j0:j0+nc] as micro-panels of nr columns.
void pack_b(const float* B, int64_t ldb, Trans tb, int64_t k0, int64_t kc, int64_t j0, int64_t nc,
            int64_t nr, float* out) {
  for (int64_t p = 0; p < nc; p += nr) {
    const int64_t cols = std::min(nr, nc - p);
    if (tb == Trans::kNo && cols == nr) {
      for (int64_t k = 0; k < kc; ++k) {
        const float* src = B + (k0 + k) * ldb + j0 + p;
        for (int64_t c = 0; c < nr; ++c) *out++ = src[c];
      }
      continue;
    }
    if (tb == Trans::kYes) {
      // Bᵀ: walk each source row once (contiguous in k) and scatter into the panel.
      for (int64_t c = 0; c < nr; ++c) {
        if (c < cols) {
          const float* src = B + (j0 + p + c) * ldb + k0;
          for (int64_t k = 0; k < kc; ++k) out[k * nr + c] = src[k];
        } else {
          for (int64_t k = 0; k < kc; ++k) out[k * nr + c] = 0.0f;
        }
      }
      out += kc * nr;
      continue;
    }
    for (int64_t k = 0; k < kc; ++k) {
      for (int64_t c = 0; c < nr; ++c)
        *out++ = c < cols ? at(B, ldb, tb, k0 + k, j0 + p + c) : 0.0f;
    }
  }
}

// Edge tiles: the kernel writes a full tile into scratch, and only the valid part is merged.
void store_partial(const float* tile, int64_t nr, float alpha, float beta, float* C, int64_t ldc,
                   int64_t rows, int64_t cols) {
  for (int64_t r = 0; r < rows; ++r) {
    float* crow = C + r * ldc;
    const float* trow = tile + r * nr;
    for (int64_t c = 0; c < cols; ++c) {
      crow[c] = beta == 0.0f ? alpha * trow[c] : alpha * trow[c] + beta * crow[c];
    }
  }
}

}  // namespace

// BLIS loop order: for each NC-wide block of columns and each KC-deep block of K, pack that
// block of B once and all of A's rows once (both in parallel), then hand out MC×NC_TASK tiles
// of C. Packing is then O(1/MC + 1/NC) of the arithmetic instead of O(1/MC) per tile task.
void gemm_with(const MicroKernel& kernel, Trans trans_a, Trans trans_b, int64_t M, int64_t N,
               int64_t K, float alpha, const float* A, int64_t lda, const float* B, int64_t ldb,
               float beta, float* C, int64_t ldc) {
  if (M <= 0 || N <= 0) return;
  if (K <= 0) {
    for (int64_t i = 0; i < M; ++i) {
      for (int64_t j = 0; j < N; ++j) C[i * ldc + j] = beta == 0.0f ? 0.0f : beta * C[i * ldc + j];
    }
    return;
  }
  const int64_t mr = kernel.mr, nr = kernel.nr;
  const int64_t m_padded = (M + mr - 1) / mr * mr;
  const int64_t m_blocks = (M + kMC - 1) / kMC;
  ThreadPool& pool = ThreadPool::current();
  // Shared packed buffers, owned by the calling thread and reused across calls.
  thread_local std::vector<float> packed_a, packed_b;
  if (packed_a.size() < static_cast<size_t>(m_padded * kKC))
    packed_a.resize(static_cast<size_t>(m_padded * kKC));
  if (packed_b.size() < static_cast<size_t>(kNC * kKC))
    packed_b.resize(static_cast<size_t>(kNC * kKC));
  float* pa = packed_a.data();
  float* pb = packed_b.data();

  for (int64_t j0 = 0; j0 < N; j0 += kNC) {
    const int64_t nc = std::min(kNC, N - j0);
    const int64_t n_panels = (nc + nr - 1) / nr;
    const int64_t n_chunks = (n_panels + kPanelsPerTask - 1) / kPanelsPerTask;
    for (int64_t k0 = 0; k0 < K; k0 += kKC) {
      const int64_t kc = std::min(kKC, K - k0);
      const float block_beta = k0 == 0 ? beta : 1.0f;
      // Every row block of A and every column panel of B, packed once for this (j0, k0) block.
      const int64_t pack_tasks = m_blocks + n_panels;
      pool.parallel_for(static_cast<size_t>(pack_tasks), [&](size_t task, int) {
        const int64_t t = static_cast<int64_t>(task);
        if (t < n_panels) {
          const int64_t p = t * nr;
          pack_b(B, ldb, trans_b, k0, kc, j0 + p, std::min(nr, nc - p), nr, pb + p * kc);
        } else {
          const int64_t i0 = (t - n_panels) * kMC;
          pack_a(A, lda, trans_a, i0, std::min(kMC, M - i0), k0, kc, mr, pa + i0 * kc);
        }
      });
      pool.parallel_for(static_cast<size_t>(m_blocks * n_chunks), [&](size_t task, int) {
        const int64_t i0 = static_cast<int64_t>(task) / n_chunks * kMC;
        const int64_t chunk = static_cast<int64_t>(task) % n_chunks;
        const int64_t mc = std::min(kMC, M - i0);
        alignas(64) float tile[kMaxTile];
        for (int64_t panel = chunk * kPanelsPerTask;
             panel < std::min(n_panels, (chunk + 1) * kPanelsPerTask); ++panel) {
          const int64_t jp = panel * nr;
          const int64_t cols = std::min(nr, nc - jp);
          for (int64_t ip = 0; ip < mc; ip += mr) {
            const int64_t rows = std::min(mr, mc - ip);
            const float* a = pa + (i0 + ip) * kc;
            const float* b = pb + jp * kc;
            float* c = C + (i0 + ip) * ldc + j0 + jp;
            if (rows == mr && cols == nr) {
              kernel.fn(kc, a, b, c, ldc, alpha, block_beta);
            } else {
              kernel.fn(kc, a, b, tile, nr, 1.0f, 0.0f);
              store_partial(tile, nr, alpha, block_beta, c, ldc, rows, cols);
            }
          }
        }
      });
    }
  }
}

void gemm(Trans trans_a, Trans trans_b, int64_t M, int64_t N, int64_t K, float alpha,
          const float* A, int64_t lda, const float* B, int64_t ldb, float beta, float* C,
          int64_t ldc) {
  gemm_with(active_microkernel(), trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

void gemm_reference(Trans trans_a, Trans trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                    const float* A, int64_t lda, const float* B, int64_t ldb, float beta, float* C,
                    int64_t ldc) {
  for (int64_t i = 0; i < M; ++i) {
    for (int64_t j = 0; j < N; ++j) {
      double sum = 0;
      for (int64_t k = 0; k < K; ++k) {
        sum += static_cast<double>(at(A, lda, trans_a, i, k)) * at(B, ldb, trans_b, k, j);
      }
      float prev = beta == 0.0f ? 0.0f : beta * C[i * ldc + j];
      C[i * ldc + j] = static_cast<float>(alpha * sum) + prev;
    }
  }
}

}  // namespace nanogpt
