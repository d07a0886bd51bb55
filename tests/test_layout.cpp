// The packing layouts (kernels/gemm/layout.hpp): each is a bijection from its block onto
// [0, size), the algebra's pieces do what they say, and every packer writes exactly what its
// kernel's layout describes — op(X) rounded as the source asks, zero in the padding.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "kernels/bf16.hpp"
#include "kernels/gemm/layout.hpp"
#include "kernels/gemm/microkernel.hpp"
#include "kernels/gemm/pack.hpp"
#include "support/kernels.hpp"

namespace nanogpt {
namespace {

using layout::Layout;

void expect_bijection(const Layout& l, const char* what) {
  std::vector<int> hits(static_cast<size_t>(l.size()), 0);
  for (int64_t r = 0; r < l.rows(); ++r) {
    for (int64_t c = 0; c < l.cols(); ++c) {
      const int64_t off = l(r, c);
      ASSERT_GE(off, 0) << what << " at " << r << "," << c;
      ASSERT_LT(off, l.size()) << what << " at " << r << "," << c;
      ASSERT_EQ(hits[static_cast<size_t>(off)]++, 0) << what << ": offset " << off << " twice";
    }
  }
}

TEST(Layout, BlockIsRowMajorAndTransposedSwapsCoordinates) {
  constexpr Layout l = Layout::block(3, 5);
  static_assert(l(2, 4) == 14 && l(1, 0) == 5);
  static_assert(l.transposed()(4, 2) == 14);
  expect_bijection(l, "block");
}

TEST(Layout, ReshapeThenPermuteGivesTheMicroPanelOrder) {
  // Panels of 4 rows; inside one, k-major: (r, k) -> (r/4)·4K + k·4 + r%4.
  constexpr int64_t R = 12, K = 5;
  constexpr Layout l = layout::fp32_a(R, K, 4);
  static_assert(l(0, 0) == 0 && l(1, 0) == 1 && l(0, 1) == 4 && l(4, 0) == 4 * K);
  for (int64_t r = 0; r < R; ++r) {
    for (int64_t k = 0; k < K; ++k) EXPECT_EQ(l(r, k), r / 4 * 4 * K + k * 4 + r % 4);
  }
  // Without permute, reshape keeps the row-major order.
  constexpr Layout same = Layout::block(R, K).reshape(0, {4, 3});
  for (int64_t r = 0; r < R; ++r) {
    for (int64_t k = 0; k < K; ++k) EXPECT_EQ(same(r, k), r * K + k);
  }
}

TEST(Layout, AmxLayoutsMatchTheTileFormats) {
  constexpr int64_t R = 64, K = 96;
  constexpr Layout a = layout::amx_a(R, K);
  // Row r, k of an A micro-panel: panel, k step, tile (r/16), tile row r%16 of 64 bytes.
  for (int64_t r = 0; r < R; ++r) {
    for (int64_t k = 0; k < K; ++k) {
      EXPECT_EQ(a(r, k),
                r / 32 * 32 * K + k / 32 * 1024 + r % 32 / 16 * 512 + r % 16 * 32 + k % 32);
    }
  }
  constexpr Layout b = layout::amx_b(K, R);
  // VNNI: tile row k/2 holds 16 columns × (k even, k odd).
  for (int64_t k = 0; k < K; ++k) {
    for (int64_t n = 0; n < R; ++n) {
      EXPECT_EQ(b(k, n), n / 32 * 32 * K + k / 32 * 1024 + n % 32 / 16 * 512 + k % 32 / 2 * 32 +
                             n % 16 * 2 + k % 2);
    }
  }
}

TEST(Layout, EveryPackingLayoutIsABijection) {
  for (int64_t panels : {1, 3}) {
    for (int64_t steps : {1, 2, 5}) {
      expect_bijection(layout::fp32_a(8 * panels, steps * 3, 8), "fp32_a");
      expect_bijection(layout::fp32_b(steps * 3, 32 * panels, 32), "fp32_b");
      expect_bijection(layout::amx_a(32 * panels, 32 * steps), "amx_a");
      expect_bijection(layout::amx_b(32 * steps, 32 * panels), "amx_b");
      expect_bijection(layout::vnni_a(12 * panels, 2 * steps, 12), "vnni_a");
      expect_bijection(layout::vnni_b(2 * steps, 32 * panels, 32), "vnni_b");
      expect_bijection(layout::amx_b(32 * steps, 32 * panels).transposed(), "amx_b transposed");
    }
  }
  for (const MicroKernel& k : bf16_microkernels_under_test()) {
    expect_bijection(k.a_layout(2 * k.mr, 3 * k.k_step), k.isa);
    expect_bijection(k.b_layout(3 * k.k_step, 2 * k.nr), k.isa);
  }
}

TEST(Layout, SwizzleIsABijectionOnItsBlocks) {
  // 8 rows of 8 chunks of 8: XOR the row (offset bits 6..8) into the chunk (bits 3..5).
  const Layout l = Layout::block(8, 64).compose(layout::Swizzle{3, 3, 3});
  expect_bijection(l, "swizzled");
  EXPECT_EQ(l(0, 17), 17);     // row 0 unchanged
  EXPECT_EQ(l(1, 0), 64 + 8);  // row 1: chunk 0 -> chunk 1
  EXPECT_EQ(l(3, 5), 3 * 64 + (5 ^ (3 << 3)));
  EXPECT_FALSE(l.separable());
}

TEST(Layout, InvalidDescriptionsAreRejected) {
  EXPECT_THROW(Layout::block(12, 4).reshape(0, {5, 2}), std::invalid_argument);
  EXPECT_THROW(Layout::block(12, 4).reshape(0, {4, 3}).permute({{0, 0}, {1, 0}}),
               std::invalid_argument);
  EXPECT_THROW(Layout::block(12, 4).permute({{0, 0}, {0, 0}}), std::invalid_argument);
}

// ---- Packers against layouts ----

// What the packer must write for Y[i][k]: rounded as the source says.
float expected_value(float x, PackSource s) {
  return s == PackSource::kF32 ? x : round_to_bf16(x);
}

float packed_value(const void* buf, int64_t off, int64_t bytes) {
  if (bytes == 4) return static_cast<const float*>(buf)[off];
  return to_float(static_cast<const bf16*>(buf)[off]);
}

// Packs every panel of a rows×K matrix Y (stored as trans says, with padding in ld) and checks
// buf[layout(i, k)] == round(Y[i][k]) with zero wherever i >= rows or k >= K.
void check_packer(const MicroKernel& kernel, bool is_a, PackSource source, Trans trans,
                  int64_t rows, int64_t K, uint32_t seed) {
  const PanelPackFn pack = (is_a ? kernel.pack_a : kernel.pack_b)[static_cast<int>(source)];
  if (pack == nullptr) return;
  const int64_t p = is_a ? kernel.mr : kernel.nr;
  const int64_t rows_p = (rows + p - 1) / p * p;
  const int64_t kp = (std::max<int64_t>(K, 1) + kernel.k_step - 1) / kernel.k_step * kernel.k_step;
  // A: (rows, k). B: the kernel's layout is (k, cols); rows of Y are its columns.
  const Layout l = is_a ? kernel.a_layout(rows_p, kp) : kernel.b_layout(kp, rows_p).transposed();
  ASSERT_EQ(l.size(), rows_p * kp);
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-2.0f, 2.0f);
  const int64_t ld = (trans == Trans::kNo ? K : rows) + 3;
  const int64_t stored_rows = trans == Trans::kNo ? rows : K;
  std::vector<float> y(static_cast<size_t>(stored_rows * ld));
  for (auto& v : y) v = u(rng);
  std::vector<bf16> y16(y.size());
  for (size_t i = 0; i < y.size(); ++i) y16[i] = to_bf16(y[i]);
  auto Y = [&](int64_t i, int64_t k) {
    return trans == Trans::kNo ? y[i * ld + k] : y[k * ld + i];
  };

  std::vector<unsigned char> buf(static_cast<size_t>(l.size() * kernel.packed_bytes), 0xAB);
  const void* src = source == PackSource::kBf16 ? static_cast<const void*>(y16.data()) : y.data();
  for (int64_t first = 0; first < rows; first += p) {
    const int64_t at = l(first, 0);
    pack(src, ld, trans, first, std::min(p, rows - first), K, kp,
         buf.data() + at * kernel.packed_bytes);
  }
  // bf16 panels: the packer generated from the layout writes the same bytes.
  if (kernel.packed_bytes == 2 && source != PackSource::kF32) {
    const Layout panel = is_a ? kernel.a_layout(p, kp) : kernel.b_layout(kp, p).transposed();
    std::vector<bf16> generated(static_cast<size_t>(rows_p * kp));
    for (int64_t first = 0; first < rows; first += p) {
      bf16* out = generated.data() + l(first, 0);
      if (source == PackSource::kBf16) {
        pack::bf16_panel_by_layout(panel, y16.data(), ld, trans, first, std::min(p, rows - first),
                                   K, out);
      } else {
        pack::bf16_panel_by_layout(panel, y.data(), ld, trans, first, std::min(p, rows - first), K,
                                   out);
      }
    }
    ASSERT_EQ(0, std::memcmp(generated.data(), buf.data(), buf.size()))
        << kernel.isa << " differs from the layout-generated packer";
  }
  for (int64_t i = 0; i < rows_p; ++i) {
    for (int64_t k = 0; k < kp; ++k) {
      const float got = packed_value(buf.data(), l(i, k), kernel.packed_bytes);
      const float want = i < rows && k < K ? expected_value(Y(i, k), source) : 0.0f;
      ASSERT_EQ(got, want) << kernel.isa << (is_a ? " A" : " B") << " source "
                           << static_cast<int>(source) << " trans " << (trans == Trans::kYes)
                           << " rows=" << rows << " K=" << K << " at " << i << "," << k;
      if (want == 0.0f) {
        uint32_t bits = 0;
        std::memcpy(&bits, buf.data() + l(i, k) * kernel.packed_bytes,
                    static_cast<size_t>(kernel.packed_bytes));
        ASSERT_EQ(bits, 0u) << "padding must be +0";
      }
    }
  }
}

TEST(Layout, EveryPackerWritesItsLayout) {
  uint32_t seed = 1;
  std::vector<MicroKernel> kernels = bf16_microkernels_under_test();
  for (const MicroKernel& k : available_microkernels()) kernels.push_back(k);
  for (const MicroKernel& kernel : kernels) {
    for (PackSource source : {PackSource::kF32, PackSource::kF32ToBf16, PackSource::kBf16}) {
      for (Trans t : {Trans::kNo, Trans::kYes}) {
        for (bool is_a : {true, false}) {
          for (int64_t rows : {1, 7, 8, 17, 31, 33, 70}) {
            for (int64_t K : {1, 2, 17, 31, 32, 33, 67}) {
              check_packer(kernel, is_a, source, t, rows, K, seed++);
            }
          }
        }
      }
    }
  }
}

// A kernel's packer of runs of A panels (MicroKernel::pack_a_across) writes, for the panels
// [first_panel, last) of a rows×K matrix Y stored contiguous in i, the bytes its one-panel
// packer writes panel by panel, and nothing outside those panels.
void check_across_packer(const MicroKernel& kernel, PackSource source, int64_t rows, int64_t K,
                         int64_t first_panel, uint32_t seed) {
  const PanelsAcrossPackFn across = kernel.pack_a_across[static_cast<int>(source)];
  if (across == nullptr) return;
  const PanelPackFn one = kernel.pack_a[static_cast<int>(source)];
  ASSERT_NE(one, nullptr);
  const int64_t p = kernel.mr, panels = (rows + p - 1) / p;
  if (first_panel >= panels) return;
  const int64_t kp = (std::max<int64_t>(K, 1) + kernel.k_step - 1) / kernel.k_step * kernel.k_step;
  const Layout l = kernel.a_layout(panels * p, kp);
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-2.0f, 2.0f);
  const int64_t ld = rows + 5;
  std::vector<float> y(static_cast<size_t>(K * ld));
  for (auto& v : y) v = u(rng);
  std::vector<bf16> y16(y.size());
  for (size_t i = 0; i < y.size(); ++i) y16[i] = to_bf16(y[i]);
  const void* src = source == PackSource::kBf16 ? static_cast<const void*>(y16.data()) : y.data();
  const size_t bytes = static_cast<size_t>(l.size() * kernel.packed_bytes);
  std::vector<unsigned char> want(bytes, 0xAB), got(bytes, 0xAB);
  const int64_t first = first_panel * p;
  for (int64_t q = first_panel; q < panels; ++q) {
    one(src, ld, Trans::kYes, q * p, std::min(p, rows - q * p), K, kp,
        want.data() + l(q * p, 0) * kernel.packed_bytes);
  }
  const int64_t stride = panels - first_panel > 1 ? (l(first + p, 0) - l(first, 0)) : 0;
  across(src, ld, first, rows - first, K, kp, panels - first_panel,
         got.data() + l(first, 0) * kernel.packed_bytes, stride * kernel.packed_bytes);
  for (size_t b = 0; b < bytes; ++b) {
    ASSERT_EQ(got[b], want[b]) << kernel.isa << " source " << static_cast<int>(source)
                               << " rows=" << rows << " K=" << K << " from panel " << first_panel
                               << ": byte " << b << " of " << bytes;
  }
}

TEST(Layout, AcrossPackersWriteWhatTheirOnePanelPackersWrite) {
  uint32_t seed = 7;
  int checked = 0;
  for (const MicroKernel& kernel : bf16_microkernels_under_test()) {
    for (PackSource source : {PackSource::kF32ToBf16, PackSource::kBf16}) {
      if (kernel.pack_a_across[static_cast<int>(source)] == nullptr) continue;
      for (int64_t rows : {1, 7, 8, 9, 17, 31, 32, 33, 47, 70, 130}) {
        for (int64_t K : {1, 2, 3, 4, 6, 17, 31, 32, 33, 67}) {
          for (int64_t first_panel : {0, 1, 3}) {
            check_across_packer(kernel, source, rows, K, first_panel, seed++);
            ++checked;
          }
        }
      }
    }
  }
  // Where no kernel under test has one (a CPU without AVX512-BF16 tests none), nothing is
  // claimed.
  if (checked == 0) GTEST_SKIP() << "no kernel under test packs runs of panels";
}

}  // namespace
}  // namespace nanogpt
