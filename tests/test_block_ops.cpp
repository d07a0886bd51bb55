// The block's products with a residual in their epilogue (ProductEpilogue::residual) give the
// bits of the product added onto a copy of the residual with beta = 1, which is what the model
// computed before the copy was dropped: for each precision, A stored as fp32 or rounded
// (ProductRows), W packed per call or once (PackedWeights), and in float64.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/bf16.hpp"
#include "model/block_ops.hpp"
#include "model/packed_weights.hpp"
#include "model/qkv_shape.hpp"

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

// Rows stored rounded (the norms' rounded copies, ProductRows::rounded) give their products the
// bits of the fp32 rows they were rounded from: the MLP's c_fc forward into rounded rows, with
// its relu², W packed per call and once, and a weight gradient whose two operands are both
// rounded. And the norm's pass writes exactly round_to_bf16 of its fp32 rows.
TEST(BlockOps, RoundedRowsGiveTheBitsOfTheirFp32Rows) {
  std::mt19937 rng(9073);
  const std::vector<float> x_raw = random_values<float>(kT * kIn, rng);
  std::vector<float> x(x_raw.size()), rstd(kT);
  std::vector<bf16> x_rounded(x.size(), bf16{0x7FC0});
  rmsnorm_rows_forward("test.norm", kT, kIn, x_raw.data(), x.data(), rstd.data(),
                       static_cast<float*>(nullptr), x_rounded.data());
  std::vector<bf16> want(x.size());
  round_to_bf16(x.data(), static_cast<int64_t>(x.size()), want.data());
  EXPECT_EQ(std::memcmp(want.data(), x_rounded.data(), want.size() * sizeof(bf16)), 0);

  const std::vector<float> W = random_values<float>(kOut * kIn, rng);
  PackedWeights packed_weights;
  const PackedB& packed = packed_weights.forward(W.data(), kOut, kIn, Precision::kBf16, 1);
  ProductEpilogue<float> relu2;
  relu2.relu_squared = true;
  for (const PackedB* pack : {static_cast<const PackedB*>(nullptr), &packed}) {
    std::vector<bf16> from_fp32(kT * kOut), from_rounded(kT * kOut);
    linear_forward(Precision::kBf16, "test.fp32", kT, kIn, kOut, x.data(), W.data(),
                   ProductRows<float>{nullptr, from_fp32.data()}, relu2, pack);
    linear_forward(Precision::kBf16, "test.rounded", kT, kIn, kOut,
                   ProductRows<float>{nullptr, x_rounded.data()}, W.data(),
                   ProductRows<float>{nullptr, from_rounded.data()}, relu2, pack);
    EXPECT_EQ(std::memcmp(from_fp32.data(), from_rounded.data(), from_fp32.size() * sizeof(bf16)),
              0)
        << (pack != nullptr ? "W packed once" : "W packed per call");
  }

  const std::vector<float> dy = random_values<float>(kT * kOut, rng);
  std::vector<bf16> dy_rounded(dy.size());
  round_to_bf16(dy.data(), static_cast<int64_t>(dy.size()), dy_rounded.data());
  const std::vector<float> dW0 = random_values<float>(kOut * kIn, rng);
  std::vector<float> dW_fp32 = dW0, dW_rounded = dW0;
  linear_backward_weight(Precision::kBf16, "test.fp32", kT, kIn, kOut,
                         ProductRows<float>{nullptr, dy_rounded.data()}, x.data(), dW_fp32.data());
  linear_backward_weight(Precision::kBf16, "test.rounded", kT, kIn, kOut,
                         ProductRows<float>{nullptr, dy_rounded.data()},
                         ProductRows<float>{nullptr, x_rounded.data()}, dW_rounded.data());
  EXPECT_TRUE(same_bits(dW_fp32, dW_rounded));
  EXPECT_FALSE(same_bits(dW0, dW_rounded));  // the product was really added
}

// The backward passes that finish dx (a norm's, a skip's add, the residual mix's) write, where
// asked, exactly round_to_bf16 of the dx they leave, and leave the same fp32 dx either way; and
// the input gradient read from those rounded rows (mlp.c_proj's: through the relu² gradient,
// into rounded or fp32 rows) has the bits it has read from the fp32 rows.
TEST(BlockOps, BackwardPassesRoundTheDxTheyFinish) {
  std::mt19937 rng(5113);
  const int64_t d = kIn, n = kT * kIn;
  const std::vector<float> y = random_values<float>(n, rng), dy = random_values<float>(n, rng);
  const std::vector<float> x0 = random_values<float>(n, rng), rstd = random_values<float>(kT, rng);
  const std::vector<float> dx_in = random_values<float>(n, rng);
  const auto check = [&](const char* what, const auto& pass) {
    std::vector<float> plain = dx_in, with = dx_in;
    std::vector<bf16> rounded(static_cast<size_t>(n), bf16{0x7FC0}), want(rounded.size());
    pass(plain.data(), static_cast<bf16*>(nullptr));
    pass(with.data(), rounded.data());
    EXPECT_TRUE(same_bits(plain, with)) << what;
    EXPECT_FALSE(same_bits(dx_in, with)) << what << ": the pass left dx as it was";
    round_to_bf16(with.data(), n, want.data());
    EXPECT_EQ(std::memcmp(want.data(), rounded.data(), want.size() * sizeof(bf16)), 0) << what;
  };
  for (bool accumulate : {false, true}) {
    check(accumulate ? "norm backward, accumulating" : "norm backward", [&](float* dx, bf16* r) {
      rmsnorm_rows_backward("test.norm.bwd", kT, d, y.data(), rstd.data(), dy.data(), dx,
                            accumulate, r);
    });
  }
  check("skip add",
        [&](float* dx, bf16* r) { add_rows("test.skip.bwd", kT, d, dy.data(), dx, r); });
  check("residual mix backward", [&](float* dx, bf16* r) {
    std::vector<float> dx0(static_cast<size_t>(n)), dskip(static_cast<size_t>(n));
    residual_mix_backward(kT, d, y.data(), x0.data(), dy.data(), 0.7f, 0.9f, 0.3f, dx, dx0.data(),
                          dskip.data(), r);
  });

  const std::vector<float> g = random_values<float>(kT * kOut, rng);
  std::vector<bf16> g_rounded(g.size());
  round_to_bf16(g.data(), static_cast<int64_t>(g.size()), g_rounded.data());
  const std::vector<float> W = random_values<float>(kOut * kIn, rng);
  const std::vector<float> H = random_values<float>(static_cast<size_t>(n), rng);
  ProductEpilogue<float> relu2_grad;
  relu2_grad.relu_squared_output = H.data();
  relu2_grad.ld = kIn;
  std::vector<bf16> into_rounded_fp32(static_cast<size_t>(n)),
      into_rounded(into_rounded_fp32.size());
  linear_backward_input(Precision::kBf16, "test.fp32", kT, kIn, kOut, g.data(), W.data(),
                        ProductRows<float>{nullptr, into_rounded_fp32.data()}, relu2_grad);
  linear_backward_input(Precision::kBf16, "test.rounded", kT, kIn, kOut,
                        ProductRows<float>{nullptr, g_rounded.data()}, W.data(),
                        ProductRows<float>{nullptr, into_rounded.data()}, relu2_grad);
  EXPECT_EQ(std::memcmp(into_rounded_fp32.data(), into_rounded.data(),
                        into_rounded.size() * sizeof(bf16)),
            0);
  std::vector<float> into_fp32(static_cast<size_t>(n), -3.0f), into_fp32_rounded = into_fp32;
  linear_backward_input(Precision::kBf16, "test.fp32", kT, kIn, kOut, g.data(), W.data(),
                        ProductRows<float>{into_fp32.data(), nullptr}, relu2_grad);
  linear_backward_input(Precision::kBf16, "test.rounded", kT, kIn, kOut,
                        ProductRows<float>{nullptr, g_rounded.data()}, W.data(),
                        ProductRows<float>{into_fp32_rounded.data(), nullptr}, relu2_grad);
  EXPECT_TRUE(same_bits(into_fp32, into_fp32_rounded));
  EXPECT_FALSE(same_bits(into_fp32, std::vector<float>(static_cast<size_t>(n), -3.0f)));
}

// Attention's inputs stored rounded only (bf16 training): the forward writes exactly
// round_to_bf16 of the rows it writes in fp32; the backward's gradient of raw, asked for rounded,
// is its fp32 gradient rounded, with the same dve and lambdas' sums. Grouped-query heads, value
// embeddings, T past a block of rows, positions past zero.
TEST(BlockOps, QkvStoredRoundedGivesTheBitsOfTheFp32Rows) {
  std::mt19937 rng(9079);
  const QkvShape s{4, 2, 16};
  const int64_t row = s.row(), heads = s.Hq + s.Hkv, V = 11;
  const RotaryTableT<float> rotary(kT + 8, s.D);
  std::vector<int64_t> pos(kT);
  std::vector<int32_t> tokens(kT);
  for (int64_t t = 0; t < kT; ++t) {
    pos[static_cast<size_t>(t)] = (t * 5) % (kT + 8);
    tokens[static_cast<size_t>(t)] = static_cast<int32_t>((t * 7) % V);
  }
  const std::vector<float> raw = random_values<float>(kT * row, rng);
  const std::vector<float> ve = random_values<float>(V * s.kv_width(), rng);
  const float la0 = 0.7f, la1 = 0.4f;
  std::vector<float> rstd(kT * heads), qkv(kT * row), rstd_rounded(rstd.size());
  std::vector<bf16> qkv_rounded(qkv.size(), bf16{0x7FC0});
  qk_norm_rotary_v_mix_forward(kT, s, rotary, pos.data(), tokens.data(), ve.data(), la0, la1,
                               raw.data(), rstd.data(), qkv.data());
  qk_norm_rotary_v_mix_forward(kT, s, rotary, pos.data(), tokens.data(), ve.data(), la0, la1,
                               raw.data(), rstd_rounded.data(), static_cast<float*>(nullptr),
                               qkv_rounded.data());
  std::vector<bf16> want(qkv.size());
  round_to_bf16(qkv.data(), static_cast<int64_t>(qkv.size()), want.data());
  EXPECT_EQ(std::memcmp(want.data(), qkv_rounded.data(), want.size() * sizeof(bf16)), 0);
  EXPECT_TRUE(same_bits(rstd, rstd_rounded));

  const std::vector<float> dqkv0 = random_values<float>(kT * row, rng);
  const std::vector<float> dve0 = random_values<float>(ve.size(), rng);
  std::vector<float> dqkv[2] = {dqkv0, dqkv0}, dve[2] = {dve0, dve0};
  std::vector<bf16> draw(dqkv0.size());
  std::array<double, 2> dla[2];
  for (int rounded = 0; rounded < 2; ++rounded) {
    const size_t k = static_cast<size_t>(rounded);
    dla[k] = qk_norm_rotary_v_mix_backward(kT, s, rotary, pos.data(), tokens.data(), ve.data(),
                                           dve[k].data(), la0, la1, raw.data(), rstd.data(),
                                           dqkv[k].data(), rounded != 0 ? draw.data() : nullptr);
  }
  // In fp32 the gradient of raw replaced dqkv; rounded, dqkv was only read.
  EXPECT_FALSE(same_bits(dqkv0, dqkv[0]));
  EXPECT_TRUE(same_bits(dqkv0, dqkv[1]));
  round_to_bf16(dqkv[0].data(), static_cast<int64_t>(dqkv[0].size()), want.data());
  EXPECT_EQ(std::memcmp(want.data(), draw.data(), want.size() * sizeof(bf16)), 0);
  EXPECT_TRUE(same_bits(dve[0], dve[1]));
  EXPECT_FALSE(same_bits(dve0, dve[1]));
  EXPECT_EQ(dla[0][0], dla[1][0]);
  EXPECT_EQ(dla[0][1], dla[1][1]);
}

// The q/k norm, RoPE and value mix's backward against central differences of its forward, in
// double: for L = Σ G·qkv(raw, ve, λ0, λ1), the gradient of raw (every element), of the value
// embedding (dve, accumulated from zero) and of the two lambdas. Grouped-query heads, repeated
// tokens, positions past zero. With h = 1e-5 a difference is off by about h² times L's third
// derivative plus 1e-16·|L|/h, far below the bound 1e-7·(1 + |gradient|).
TEST(BlockOps, QkNormRotaryVMixBackwardIsTheForwardsGradient) {
  std::mt19937 rng(9083);
  const QkvShape s{4, 2, 8};
  const int64_t T = 9, row = s.row(), heads = s.Hq + s.Hkv, V = 5, kv = s.kv_width();
  const RotaryTableT<double> rotary(T + 4, s.D);
  std::vector<int64_t> pos(T);
  std::vector<int32_t> tokens(T);
  for (int64_t t = 0; t < T; ++t) {
    pos[static_cast<size_t>(t)] = (t * 3 + 1) % (T + 4);
    tokens[static_cast<size_t>(t)] = static_cast<int32_t>((t * 2) % V);
  }
  std::vector<double> raw = random_values<double>(T * row, rng);
  std::vector<double> ve = random_values<double>(V * kv, rng);
  double la[2] = {0.7, 0.4};
  const std::vector<double> G = random_values<double>(T * row, rng);
  std::vector<double> rstd(T * heads), qkv(T * row);
  const auto loss = [&] {
    qk_norm_rotary_v_mix_forward(T, s, rotary, pos.data(), tokens.data(), ve.data(), la[0], la[1],
                                 raw.data(), rstd.data(), qkv.data());
    double sum = 0;
    for (size_t i = 0; i < qkv.size(); ++i) sum += G[i] * qkv[i];
    return sum;
  };
  loss();  // rstd for the backward
  std::vector<double> draw = G, dve(ve.size(), 0.0);
  const std::array<double, 2> dla =
      qk_norm_rotary_v_mix_backward(T, s, rotary, pos.data(), tokens.data(), ve.data(), dve.data(),
                                    la[0], la[1], raw.data(), rstd.data(), draw.data());
  constexpr double kH = 1e-5;
  const auto difference = [&](double& x) {
    const double x0 = x;
    x = x0 + kH;
    const double up = loss();
    x = x0 - kH;
    const double down = loss();
    x = x0;
    return (up - down) / (2 * kH);
  };
  const auto near = [](double want, double got) {
    return std::abs(want - got) <= 1e-7 * (1 + std::abs(want));
  };
  int wrong = 0;
  for (size_t i = 0; i < raw.size(); ++i) {
    const double want = difference(raw[i]);
    if (!near(want, draw[i]) && ++wrong <= 5) {
      ADD_FAILURE() << "d raw[" << i << "] (token " << i / static_cast<size_t>(row) << ", column "
                    << i % static_cast<size_t>(row) << "): differences " << want << ", backward "
                    << draw[i];
    }
  }
  for (size_t i = 0; i < ve.size(); ++i) {
    const double want = difference(ve[i]);
    if (!near(want, dve[i]) && ++wrong <= 5) {
      ADD_FAILURE() << "d ve[" << i << "]: differences " << want << ", backward " << dve[i];
    }
  }
  for (size_t l = 0; l < 2; ++l) {
    const double want = difference(la[l]);
    EXPECT_TRUE(near(want, dla[l]))
        << "d lambda" << l << ": differences " << want << ", backward " << dla[l];
  }
  EXPECT_EQ(wrong, 0);
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
