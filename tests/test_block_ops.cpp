// The block's products with a residual in their epilogue (ProductEpilogue::residual) give the
// bits of the product added onto a copy of the residual with beta = 1, which is what the model
// computed before the copy was dropped: for each precision, A stored as fp32 or rounded
// (ProductRows), W packed per call or once (PackedWeights), and in float64.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/bf16.hpp"
#include "model/block_ops.hpp"
#include "model/packed_weights.hpp"

namespace nanogpt {
namespace {

template <class Real>
std::vector<Real> random_values(size_t n, std::mt19937& rng) {
  std::uniform_real_distribution<double> u(-1.0, 1.0);
  std::vector<Real> v(n);
  for (Real& x : v) x = static_cast<Real>(u(rng));
  return v;
}

template <class Real>
bool same_bits(const std::vector<Real>& a, const std::vector<Real>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(Real)) == 0;
}

// T rows whose last block is partial, and widths that are not whole tiles.
constexpr int64_t kT = 77, kIn = 96, kOut = 40;

TEST(BlockOps, ResidualEpilogueGivesTheBitsOfBetaOneOnACopy) {
  std::mt19937 rng(9071);
  const std::vector<float> x = random_values<float>(kT * kIn, rng);
  const std::vector<float> W = random_values<float>(kOut * kIn, rng);
  const std::vector<float> residual = random_values<float>(kT * kOut, rng);
  std::vector<bf16> x_rounded(x.size());
  round_to_bf16(x.data(), static_cast<int64_t>(x.size()), x_rounded.data());
  for (const Precision precision : {Precision::kFp32, Precision::kBf16}) {
    PackedWeights packed_weights;
    const PackedB& packed = packed_weights.forward(W.data(), kOut, kIn, precision, 1);
    for (const PackedB* pack : {static_cast<const PackedB*>(nullptr), &packed}) {
      for (const bool rounded : {false, true}) {
        if (rounded && precision != Precision::kBf16) continue;  // bf16 rows feed bf16 products
        const std::string what = std::string(precision == Precision::kBf16 ? "bf16" : "fp32") +
                                 (pack != nullptr ? ", W packed once" : ", W packed per call") +
                                 (rounded ? ", x rounded" : ", x fp32");
        ProductRows<float> rows;
        if (rounded) {
          rows.rounded = x_rounded.data();
        } else {
          rows.values = const_cast<float*>(x.data());
        }
        std::vector<float> on_copy = residual;
        linear_forward(precision, "test.copy", kT, kIn, kOut, rows, W.data(), 1.0f, on_copy.data(),
                       {}, pack);
        ProductEpilogue<float> onto;
        onto.residual = residual.data();
        std::vector<float> in_epilogue(residual.size(), -7.0f);  // overwritten, never read
        linear_forward(precision, "test.residual", kT, kIn, kOut, rows, W.data(), 0.0f,
                       in_epilogue.data(), onto, pack);
        EXPECT_TRUE(same_bits(on_copy, in_epilogue)) << what;
        // And the residual is really added: not the product alone.
        std::vector<float> alone(residual.size());
        linear_forward(precision, "test.alone", kT, kIn, kOut, rows, W.data(), 0.0f, alone.data(),
                       {}, pack);
        EXPECT_FALSE(same_bits(alone, in_epilogue)) << what;
      }
    }
  }
}

TEST(BlockOps, ResidualEpilogueInFloat64) {
  std::mt19937 rng(9072);
  const std::vector<double> x = random_values<double>(kT * kIn, rng);
  const std::vector<double> W = random_values<double>(kOut * kIn, rng);
  const std::vector<double> residual = random_values<double>(kT * kOut, rng);
  std::vector<double> on_copy = residual;
  linear_forward(Precision::kFp32, "test.copy", kT, kIn, kOut, x.data(), W.data(), 1.0,
                 on_copy.data());
  ProductEpilogue<double> onto;
  onto.residual = residual.data();
  std::vector<double> in_epilogue(residual.size(), -7.0);
  linear_forward(Precision::kFp32, "test.residual", kT, kIn, kOut, x.data(), W.data(), 0.0,
                 in_epilogue.data(), onto);
  EXPECT_TRUE(same_bits(on_copy, in_epilogue));
}

}  // namespace
}  // namespace nanogpt
