#include "kernels/gemm.hpp"

#include <algorithm>
#include <vector>

#include "runtime/thread_pool.hpp"

namespace nanogpt {

namespace {

// Register block: MR rows × NR columns of C live in registers through the K loop. NR = 16 is
// one AVX-512 vector or two AVX2 vectors.
constexpr int64_t kMR = 6;
constexpr int64_t kNR = 16;
// Cache blocks: a KC×NR panel of B stays in L1, an MC×KC block of A in L2.
constexpr int64_t kMC = 96;
constexpr int64_t kKC = 256;
constexpr int64_t kNC = 512;

inline float at(const float* X, int64_t ld, Trans t, int64_t r, int64_t c) {
  return t == Trans::kNo ? X[r * ld + c] : X[c * ld + r];
}

// Packs op(A)[i0:i0+mc, k0:k0+kc] as micro-panels of kMR rows: panel p holds, for each k, the
// kMR values of rows p·kMR.. (zero-padded past mc).
void pack_a(const float* A, int64_t lda, Trans ta, int64_t i0, int64_t mc, int64_t k0, int64_t kc,
            float* out) {
  for (int64_t p = 0; p < mc; p += kMR) {
    int64_t rows = std::min(kMR, mc - p);
    for (int64_t k = 0; k < kc; ++k) {
      for (int64_t r = 0; r < kMR; ++r) {
        *out++ = r < rows ? at(A, lda, ta, i0 + p + r, k0 + k) : 0.0f;
      }
    }
  }
}

// Packs op(B)[k0:k0+kc, j0:j0+nc] as micro-panels of kNR columns.
void pack_b(const float* B, int64_t ldb, Trans tb, int64_t k0, int64_t kc, int64_t j0, int64_t nc,
            float* out) {
  for (int64_t p = 0; p < nc; p += kNR) {
    int64_t cols = std::min(kNR, nc - p);
    for (int64_t k = 0; k < kc; ++k) {
      if (tb == Trans::kNo && cols == kNR) {
        const float* src = B + (k0 + k) * ldb + j0 + p;
        for (int64_t c = 0; c < kNR; ++c) out[c] = src[c];
        out += kNR;
        continue;
      }
      for (int64_t c = 0; c < kNR; ++c) {
        *out++ = c < cols ? at(B, ldb, tb, k0 + k, j0 + p + c) : 0.0f;
      }
    }
  }
}

// C[0:rows, 0:cols] = alpha·(a-panel · b-panel) + beta·C. target_clones compiles it once per
// ISA and picks at load time; issue-4 kernels replace this with hand-written micro-kernels.
__attribute__((target_clones("avx512f", "arch=haswell", "default"))) void micro_kernel(
    int64_t kc, const float* a, const float* b, float alpha, float beta, float* C, int64_t ldc,
    int64_t rows, int64_t cols) {
  float acc[kMR][kNR] = {};
  for (int64_t k = 0; k < kc; ++k) {
    const float* bk = b + k * kNR;
    const float* ak = a + k * kMR;
    for (int64_t r = 0; r < kMR; ++r) {
      float ar = ak[r];
      for (int64_t c = 0; c < kNR; ++c) acc[r][c] += ar * bk[c];
    }
  }
  for (int64_t r = 0; r < rows; ++r) {
    float* crow = C + r * ldc;
    if (beta == 0.0f) {
      for (int64_t c = 0; c < cols; ++c) crow[c] = alpha * acc[r][c];
    } else {
      for (int64_t c = 0; c < cols; ++c) crow[c] = alpha * acc[r][c] + beta * crow[c];
    }
  }
}

}  // namespace

void gemm(Trans trans_a, Trans trans_b, int64_t M, int64_t N, int64_t K, float alpha,
          const float* A, int64_t lda, const float* B, int64_t ldb, float beta, float* C,
          int64_t ldc) {
  if (M <= 0 || N <= 0) return;
  if (K <= 0) {
    for (int64_t i = 0; i < M; ++i) {
      for (int64_t j = 0; j < N; ++j) C[i * ldc + j] = beta == 0.0f ? 0.0f : beta * C[i * ldc + j];
    }
    return;
  }
  const int64_t m_tiles = (M + kMC - 1) / kMC;
  const int64_t n_tiles = (N + kNC - 1) / kNC;
  ThreadPool& pool = ThreadPool::current();
  struct Scratch {
    std::vector<float> a, b;
  };
  std::vector<Scratch> scratch(static_cast<size_t>(pool.size()));
  pool.parallel_for(static_cast<size_t>(m_tiles * n_tiles), [&](size_t task, int worker) {
    const int64_t i0 = static_cast<int64_t>(task) / n_tiles * kMC;
    const int64_t j0 = static_cast<int64_t>(task) % n_tiles * kNC;
    const int64_t mc = std::min(kMC, M - i0);
    const int64_t nc = std::min(kNC, N - j0);
    Scratch& s = scratch[static_cast<size_t>(worker)];
    s.a.resize(static_cast<size_t>(((kMC + kMR - 1) / kMR) * kMR * kKC));
    s.b.resize(static_cast<size_t>(((kNC + kNR - 1) / kNR) * kNR * kKC));
    for (int64_t k0 = 0; k0 < K; k0 += kKC) {
      const int64_t kc = std::min(kKC, K - k0);
      const float block_beta = k0 == 0 ? beta : 1.0f;
      pack_a(A, lda, trans_a, i0, mc, k0, kc, s.a.data());
      pack_b(B, ldb, trans_b, k0, kc, j0, nc, s.b.data());
      for (int64_t jp = 0; jp < nc; jp += kNR) {
        for (int64_t ip = 0; ip < mc; ip += kMR) {
          micro_kernel(kc, s.a.data() + ip * kc, s.b.data() + jp * kc, alpha, block_beta,
                       C + (i0 + ip) * ldc + j0 + jp, ldc, std::min(kMR, mc - ip),
                       std::min(kNR, nc - jp));
        }
      }
    }
  });
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
