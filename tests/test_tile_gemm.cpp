// TileGemm (kernels/gemm/tile_gemm.hpp), the tile products attention runs: on every micro-kernel
// and partial tiles of every size class, the packers write only what the products read and the
// products read nothing else. Packed blocks start as NaN, so a product that read a value the
// packers left alone would turn its outputs NaN; each output is checked against a double
// reference of the same operands (rounded to bf16 where the kernel's packers round them).
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "kernels/bf16.hpp"
#include "kernels/gemm/tile_gemm.hpp"
#include "runtime/error.hpp"
#include "support/float_bits.hpp"
#include "support/kernels.hpp"

namespace nanogpt {
namespace {

constexpr int64_t kTile = 64;

// A packed block buffer, every byte of it a NaN to begin with.
std::vector<std::byte> nan_block(const TileGemm& g, Block b) {
  std::vector<float> nan(static_cast<size_t>(g.bytes(b)) / sizeof(float),
                         std::numeric_limits<float>::quiet_NaN());
  std::vector<std::byte> out(static_cast<size_t>(g.bytes(b)));
  std::memcpy(out.data(), nan.data(), out.size());
  return out;
}

float operand(float x, PackSource source) {
  return source == PackSource::kF32ToBf16 ? round_to_bf16(x) : x;
}

struct Shape {
  int64_t rows, cols, k;  // valid rows of A, columns of B, values of k
};

// c = A·B for A [rows × k] and B [k × cols], packed as the two blocks attention's P·V product
// uses (A: rows of the tile by tile tokens as k; B: D columns by tile tokens as k) or as its
// score product uses (A: rows by D as k; B: tile columns by D as k).
void check_product(const MicroKernel& kernel, PackSource source, Shape s, bool k_is_tile,
                   uint32_t seed) {
  const Precision precision =
      source == PackSource::kF32ToBf16 ? Precision::kBf16 : Precision::kFp32;
  const int64_t D = k_is_tile ? s.cols : s.k;  // the head dimension of the blocks
  const TileGemm g(kernel, precision, kTile, D);
  const Block ba = k_is_tile ? Block::kRowsByTile : Block::kRowsByD;
  const Block bb = k_is_tile ? Block::kDByTile : Block::kTileByD;
  const std::vector<float> a = random_values(static_cast<size_t>(s.rows * s.k), seed);
  const std::vector<float> b = random_values(static_cast<size_t>(s.k * s.cols), seed + 1);
  std::vector<std::byte> pa = nan_block(g, ba), pb = nan_block(g, bb);
  g.pack_a(a.data(), s.k, Trans::kNo, s.rows, s.k, ba, pa.data());
  // B's rows of Y = Bᵀ are its columns: B [k × cols] read transposed.
  g.pack_b(b.data(), s.cols, Trans::kYes, s.cols, s.k, bb, pb.data());
  const int64_t ldc = std::max(g.dn(), kTile);
  std::vector<float> c(static_cast<size_t>(g.rows() * ldc), 0.0f);
  {
    const TaskScope scope(g);
    g.product(s.rows, s.cols, g.k_steps(s.k), pa.data(), ba, pb.data(), bb, c.data(), ldc, false);
  }
  const std::string who = std::string(kernel.isa) +
                          (source == PackSource::kF32ToBf16 ? " bf16" : " fp32") +
                          " rows=" + std::to_string(s.rows) + " cols=" + std::to_string(s.cols) +
                          " k=" + std::to_string(s.k) + (k_is_tile ? " (P·V)" : " (scores)");
  for (int64_t i = 0; i < s.rows; ++i) {
    for (int64_t j = 0; j < s.cols; ++j) {
      double want = 0.0, magnitude = 0.0;
      for (int64_t k = 0; k < s.k; ++k) {
        const double term = static_cast<double>(operand(a[i * s.k + k], source)) *
                            operand(b[k * s.cols + j], source);
        want += term;
        magnitude += std::fabs(term);
      }
      const float got = c[static_cast<size_t>(i * ldc + j)];
      ASSERT_TRUE(std::isfinite(got))
          << who << ": c[" << i << "][" << j << "] read a value the packers did not write";
      // fp32 sums of s.k products: within k·2^-24 of the sum of magnitudes, with room to spare.
      EXPECT_NEAR(got, want, 4.0 * static_cast<double>(s.k) * 0x1p-24 * magnitude + 1e-30)
          << who << ": c[" << i << "][" << j << "]";
    }
  }
}

TEST(TileGemm, PartialTilesReadOnlyWhatThePackersWrote) {
  // Rows and k of one token up to a whole tile, past and short of every mr (4 to 32), nr (8 to
  // 32) and k step (1, 2, 32); head dims that pad to nr and to the k step.
  const Shape p_v[] = {{1, 16, 1},   {3, 24, 5},  {10, 128, 20},
                       {17, 40, 33}, {33, 8, 63}, {64, 128, 64}};
  const Shape scores[] = {{1, 1, 16}, {5, 10, 24}, {20, 10, 128}, {33, 17, 40}, {64, 64, 36}};
  uint32_t seed = 1;
  for (const auto& [kernel, source] : every_gemm_kernel()) {
    for (const Shape& s : p_v) check_product(kernel, source, s, /*k_is_tile=*/true, seed += 2);
    for (const Shape& s : scores) check_product(kernel, source, s, /*k_is_tile=*/false, seed += 2);
  }
}

using test::bits_of;

// A product told where the causal rule hides part of the tile (CausalSkip) gives every output a
// visible pair needs the bits the whole product gives: the score products at each visible
// (key, query), the products over keys and over queries everywhere (their A zero at the hidden
// pairs, as P and dS are). Each delta from far below to far past the tile, on every kernel; the
// skips must also happen (some scores left out, NaN where the buffer started NaN).
TEST(TileGemm, CausalSkipKeepsWhatVisiblePairsNeed) {
  const int64_t D = 40, ldc = 64;
  uint32_t seed = 5;
  for (const auto& [kernel, source] : every_gemm_kernel()) {
    const Precision precision =
        source == PackSource::kF32ToBf16 ? Precision::kBf16 : Precision::kFp32;
    const TileGemm g(kernel, precision, kTile, D);
    const std::string who =
        std::string(kernel.isa) + (source == PackSource::kF32ToBf16 ? " bf16" : " fp32");
    bool skipped_some = false;
    for (const int64_t delta : {-70, -40, -9, -1, 0, 1, 5, 7, 8, 31, 33, 63, 70}) {
      // Scores: rows by D as k, times tile columns by D as k.
      const std::vector<float> a = random_values(static_cast<size_t>(kTile * D), seed++);
      const std::vector<float> b = random_values(static_cast<size_t>(kTile * D), seed++);
      std::vector<std::byte> pa = nan_block(g, Block::kRowsByD), pb = nan_block(g, Block::kTileByD);
      g.pack_a(a.data(), D, Trans::kNo, kTile, D, Block::kRowsByD, pa.data());
      g.pack_b(b.data(), D, Trans::kNo, kTile, D, Block::kTileByD, pb.data());
      for (const CausalAxes axes : {CausalAxes::kKeysByQueries, CausalAxes::kQueriesByKeys}) {
        const CausalSkip skip{axes, delta};
        std::vector<float> whole(static_cast<size_t>(g.rows() * ldc));
        std::vector<float> part(whole.size(), std::numeric_limits<float>::quiet_NaN());
        {
          const TaskScope scope(g);
          g.product(kTile, kTile, g.dk(), pa.data(), Block::kRowsByD, pb.data(), Block::kTileByD,
                    whole.data(), ldc, false);
          g.product(kTile, kTile, g.dk(), pa.data(), Block::kRowsByD, pb.data(), Block::kTileByD,
                    part.data(), ldc, false, &skip);
        }
        for (int64_t i = 0; i < kTile; ++i) {
          for (int64_t j = 0; j < kTile; ++j) {
            const bool visible =
                axes == CausalAxes::kKeysByQueries ? i <= j + delta : j <= i + delta;
            const size_t at = static_cast<size_t>(i * ldc + j);
            if (std::isnan(part[at])) skipped_some = true;
            if (visible) {
              ASSERT_EQ(bits_of(part[at]), bits_of(whole[at]))
                  << who << " scores, axes " << static_cast<int>(axes) << " delta " << delta
                  << " at " << i << "," << j;
            }
          }
        }
      }
      // Over keys (rows queries, k keys) or over queries (rows keys, k queries): rows by tile
      // tokens as k, zero where hidden, times D columns by tile tokens as k; accumulated onto
      // the same c, or written.
      for (const CausalAxes axes : {CausalAxes::kQueriesOverKeys, CausalAxes::kKeysOverQueries}) {
        std::vector<float> p = random_values(static_cast<size_t>(kTile * kTile), seed++);
        for (int64_t i = 0; i < kTile; ++i) {
          for (int64_t k = 0; k < kTile; ++k) {
            const bool hidden =
                axes == CausalAxes::kQueriesOverKeys ? k > i + delta : i > k + delta;
            if (hidden) p[static_cast<size_t>(i * kTile + k)] = 0.0f;
          }
        }
        const std::vector<float> v = random_values(static_cast<size_t>(kTile * D), seed++);
        std::vector<std::byte> pp = nan_block(g, Block::kRowsByTile);
        std::vector<std::byte> pv = nan_block(g, Block::kDByTile);
        g.pack_a(p.data(), kTile, Trans::kNo, kTile, kTile, Block::kRowsByTile, pp.data());
        g.pack_b(v.data(), D, Trans::kYes, D, kTile, Block::kDByTile, pv.data());
        const std::vector<float> c0 = random_values(static_cast<size_t>(g.rows() * g.dn()), seed++);
        for (const bool accumulate : {true, false}) {
          const CausalSkip skip{axes, delta};
          std::vector<float> whole = c0, part = c0;
          {
            const TaskScope scope(g);
            g.product(kTile, D, kTile, pp.data(), Block::kRowsByTile, pv.data(), Block::kDByTile,
                      whole.data(), g.dn(), accumulate);
            g.product(kTile, D, kTile, pp.data(), Block::kRowsByTile, pv.data(), Block::kDByTile,
                      part.data(), g.dn(), accumulate, &skip);
          }
          for (int64_t i = 0; i < kTile; ++i) {
            for (int64_t j = 0; j < D; ++j) {
              const size_t at = static_cast<size_t>(i * g.dn() + j);
              ASSERT_EQ(bits_of(part[at]), bits_of(whole[at]))
                  << who << " over " << (axes == CausalAxes::kQueriesOverKeys ? "keys" : "queries")
                  << ", delta " << delta << (accumulate ? " accumulated" : "") << " at " << i << ","
                  << j;
            }
          }
        }
      }
    }
    EXPECT_TRUE(skipped_some) << who << ": no score micro-tile was left out at any delta";
  }
}

// store() writes alpha·acc exactly (the product is rounded once, as alpha·acc in C++), whether
// it streams (a destination whose rows start on cache lines, on a kernel with non-temporal
// stores) or not (one float past that), and touches nothing outside the rows and columns given.
// Operands already stored in bf16 (attention's q, k, v and dO in bf16 training) pack into the
// bytes their fp32 originals pack into: every block, both source orders (the across-panels A
// packer included), partial rows and k, strided sources, on every bf16 kernel. The buffers start
// as the same garbage, so a packer writing more or less than the other also differs.
TEST(TileGemm, Bf16OperandsPackAsTheirFp32OriginalsDo) {
  constexpr int64_t D = 48, ld = 2 * kTile + 3;
  const Block blocks[] = {Block::kRowsByD, Block::kRowsByTile, Block::kTileByD, Block::kDByTile};
  uint32_t seed = 11;
  for (const MicroKernel& kernel : bf16_microkernels_under_test()) {
    const TileGemm g(kernel, Precision::kBf16, kTile, D);
    for (const Block b : blocks) {
      const bool is_a = b == Block::kRowsByD || b == Block::kRowsByTile;
      const int64_t rows_max = b == Block::kDByTile ? D : kTile;
      const int64_t k_max = b == Block::kRowsByD || b == Block::kTileByD ? D : kTile;
      for (const Trans trans : {Trans::kNo, Trans::kYes}) {
        for (const auto& [valid, k_valid] : {std::pair<int64_t, int64_t>{rows_max, k_max},
                                             {rows_max - 5, k_max - 3},
                                             {1, 1},
                                             {rows_max / 2 + 1, k_max}}) {
          // Y[i][k] = src[i·ld + k], or src[k·ld + i] transposed; ld past either extent.
          const std::vector<float> f = random_values(static_cast<size_t>(ld * ld), seed++);
          std::vector<bf16> h(f.size());
          for (size_t i = 0; i < f.size(); ++i) h[i] = to_bf16(f[i]);
          std::vector<std::byte> from_f32 = nan_block(g, b), from_bf16 = nan_block(g, b);
          if (is_a) {
            g.pack_a(f.data(), ld, trans, valid, k_valid, b, from_f32.data());
            g.pack_a(h.data(), ld, trans, valid, k_valid, b, from_bf16.data());
          } else {
            g.pack_b(f.data(), ld, trans, valid, k_valid, b, from_f32.data());
            g.pack_b(h.data(), ld, trans, valid, k_valid, b, from_bf16.data());
          }
          ASSERT_EQ(std::memcmp(from_f32.data(), from_bf16.data(), from_f32.size()), 0)
              << kernel.isa << " block " << static_cast<int>(b) << " trans "
              << (trans == Trans::kYes) << " valid " << valid << " k_valid " << k_valid;
        }
      }
    }
  }
}

TEST(TileGemm, Bf16OperandsNeedBf16Products) {
  const TileGemm g(available_microkernels().front(), Precision::kFp32, kTile, 16);
  const std::vector<bf16> h(static_cast<size_t>(kTile * 16), to_bf16(0.5f));
  std::vector<std::byte> out(static_cast<size_t>(g.bytes(Block::kRowsByD)));
  EXPECT_THROW(g.pack_a(h.data(), 16, Trans::kNo, kTile, 16, Block::kRowsByD, out.data()), Error);
}

TEST(TileGemm, StoreWritesTheScaledAccumulatorAlignedOrNot) {
  const int64_t rows = 37, ld_acc = 80, ld = 96;
  const std::vector<float> acc = random_values(static_cast<size_t>(rows * ld_acc), 7);
  for (const auto& [kernel, source] : every_gemm_kernel()) {
    const TileGemm g(kernel, source == PackSource::kF32ToBf16 ? Precision::kBf16 : Precision::kFp32,
                     kTile, 64);
    for (const int64_t cols : {int64_t{64}, int64_t{50}}) {
      for (const float alpha : {1.0f, 0.3f}) {
        for (const int64_t shift : {int64_t{0}, int64_t{1}}) {
          std::vector<float> storage(static_cast<size_t>(rows * ld + 32), -7.0f);
          float* aligned = storage.data();
          while (reinterpret_cast<uintptr_t>(aligned) % 64 != 0) ++aligned;
          float* const dst = aligned + shift;
          g.store(acc.data(), ld_acc, rows, cols, alpha, dst, ld);
          const std::string who = std::string(kernel.isa) + " cols=" + std::to_string(cols) +
                                  " alpha=" + std::to_string(alpha) +
                                  (shift == 0 ? " aligned" : " unaligned");
          for (int64_t i = 0; i < rows; ++i) {
            for (int64_t j = 0; j < ld; ++j) {
              const float want =
                  j < cols ? alpha * acc[static_cast<size_t>(i * ld_acc + j)] : -7.0f;
              ASSERT_EQ(std::bit_cast<uint32_t>(dst[i * ld + j]), std::bit_cast<uint32_t>(want))
                  << who << ": dst[" << i << "][" << j << "]";
            }
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace nanogpt
