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

// C tile = alpha·acc + beta·C for the valid rows × cols of an mr×nr accumulator.
void store_tile(const float* acc, int64_t nr, float alpha, float beta, float* C, int64_t ldc,
                int64_t rows, int64_t cols) {
  for (int64_t r = 0; r < rows; ++r) {
    float* crow = C + r * ldc;
    const float* arow = acc + r * nr;
    if (beta == 0.0f) {
      for (int64_t c = 0; c < cols; ++c) crow[c] = alpha * arow[c];
    } else {
      for (int64_t c = 0; c < cols; ++c) crow[c] = alpha * arow[c] + beta * crow[c];
    }
  }
}

}  // namespace

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
  const int64_t m_tiles = (M + kMC - 1) / kMC;
  const int64_t n_tiles = (N + kNC - 1) / kNC;
  ThreadPool& pool = ThreadPool::current();
  pool.parallel_for(static_cast<size_t>(m_tiles * n_tiles), [&](size_t task, int) {
    const int64_t i0 = static_cast<int64_t>(task) / n_tiles * kMC;
    const int64_t j0 = static_cast<int64_t>(task) % n_tiles * kNC;
    const int64_t mc = std::min(kMC, M - i0);
    const int64_t nc = std::min(kNC, N - j0);
    // Packing buffers live as long as the thread: allocating (and zeroing) them per call cost
    // more than the arithmetic for the model's small matrices.
    thread_local std::vector<float> packed_a(static_cast<size_t>(kMC * kKC));
    thread_local std::vector<float> packed_b(static_cast<size_t>(kNC * kKC));
    alignas(64) float acc[kMaxTile];
    for (int64_t k0 = 0; k0 < K; k0 += kKC) {
      const int64_t kc = std::min(kKC, K - k0);
      const float block_beta = k0 == 0 ? beta : 1.0f;
      pack_a(A, lda, trans_a, i0, mc, k0, kc, mr, packed_a.data());
      pack_b(B, ldb, trans_b, k0, kc, j0, nc, nr, packed_b.data());
      for (int64_t jp = 0; jp < nc; jp += nr) {
        for (int64_t ip = 0; ip < mc; ip += mr) {
          kernel.fn(kc, packed_a.data() + ip * kc, packed_b.data() + jp * kc, acc);
          store_tile(acc, nr, alpha, block_beta, C + (i0 + ip) * ldc + j0 + jp, ldc,
                     std::min(mr, mc - ip), std::min(nr, nc - jp));
        }
      }
    }
  });
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
