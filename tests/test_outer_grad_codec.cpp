// The outer-gradient codec against a reference written from its definition: per block of 32,
// the smallest power-of-two scale that fits the largest magnitude under the format's maximum,
// then each value rounded to the nearest grid value (ties to the even code).
#include "optim/outer_grad_codec.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "kernels/bf16.hpp"
#include "kernels/fp8.hpp"
#include "runtime/error.hpp"
#include "runtime/thread_pool.hpp"

namespace nanogpt {
namespace {

// Non-negative grid values with their codes' parity (ties go to the even code).
struct Grid {
  std::vector<double> values;
  double max() const { return values.back(); }
};

Grid e2m1_grid() {
  return {{0, 0.5, 1, 1.5, 2, 3, 4, 6}};
}

Grid e4m3_grid() {
  Grid g;
  for (int c = 0; c < 0x7f; ++c) g.values.push_back(e4m3_to_float(static_cast<uint8_t>(c)));
  return g;  // codes 0..0x7e in value order: the index is the code
}

double nearest(const Grid& g, double x) {
  const double a = std::fabs(x);
  if (a >= g.max()) return std::copysign(g.max(), x);
  size_t hi = 1;
  while (g.values[hi] < a) ++hi;
  const double lo_v = g.values[hi - 1], hi_v = g.values[hi];
  const double mid = (lo_v + hi_v) / 2;
  double r;
  if (a < mid) {
    r = lo_v;
  } else if (a > mid) {
    r = hi_v;
  } else {
    r = (hi - 1) % 2 == 0 ? lo_v : hi_v;
  }
  return std::copysign(r, x);
}

std::vector<float> reference_decode(const std::vector<float>& x, int bits) {
  std::vector<float> out(x.size());
  if (bits == 32) return x;
  if (bits == 16) {
    for (size_t i = 0; i < x.size(); ++i) out[i] = round_to_bf16(x[i]);
    return out;
  }
  const Grid g = bits == 4 ? e2m1_grid() : e4m3_grid();
  for (size_t b = 0; b < x.size(); b += kOuterGradBlock) {
    const size_t n = std::min(kOuterGradBlock, x.size() - b);
    double amax = 0;
    for (size_t i = 0; i < n; ++i) amax = std::max(amax, std::fabs(static_cast<double>(x[b + i])));
    int e = -126;
    while (amax / std::ldexp(1.0, e) > g.max()) ++e;
    for (size_t i = 0; i < n; ++i) {
      const double scaled = static_cast<double>(x[b + i]) / std::ldexp(1.0, e);
      out[b + i] = static_cast<float>(nearest(g, scaled) * std::ldexp(1.0, e));
    }
  }
  return out;
}

std::vector<float> random_values(std::mt19937& rng, size_t n) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_int_distribution<int> magnitude(-30, 10);
  std::vector<float> x(n);
  for (size_t b = 0; b < n; b += kOuterGradBlock) {
    const int e = magnitude(rng);  // blocks of very different scales, as real tensors have
    for (size_t i = b; i < std::min(n, b + kOuterGradBlock); ++i) {
      x[i] = std::ldexp(normal(rng), e);
    }
  }
  return x;
}

TEST(OuterGradCodec, EncodedSizes) {
  EXPECT_EQ(outer_grad_encoded_bytes(32, 4), 17u);
  EXPECT_EQ(outer_grad_encoded_bytes(33, 4), 17u + 2u);
  EXPECT_EQ(outer_grad_encoded_bytes(64, 8), 66u);
  EXPECT_EQ(outer_grad_encoded_bytes(5, 16), 10u);
  EXPECT_EQ(outer_grad_encoded_bytes(5, 32), 20u);
  EXPECT_EQ(outer_grad_encoded_bytes(0, 4), 0u);
  for (int64_t b : {4, 8, 16, 32}) EXPECT_TRUE(outer_grad_bits_supported(b));
  for (int64_t b : {0, 1, 2, 6, 12, 64}) EXPECT_FALSE(outer_grad_bits_supported(b));
}

TEST(OuterGradCodec, DecodesToTheDefinitionsRounding) {
  std::mt19937 rng(7);
  for (int bits : {4, 8, 16, 32}) {
    for (size_t n : {size_t{1}, size_t{31}, size_t{32}, size_t{33}, size_t{1000}}) {
      const std::vector<float> x = random_values(rng, n);
      std::vector<uint8_t> bytes(outer_grad_encoded_bytes(n, bits));
      encode_outer_grad(x, bits, bytes, "test");
      std::vector<float> acc(n, 0.0f);
      decode_add_outer_grad(bytes, bits, acc);
      const std::vector<float> want = reference_decode(x, bits);
      for (size_t i = 0; i < n; ++i) {
        ASSERT_EQ(acc[i], want[i]) << "bits " << bits << " n " << n << " i " << i << " x " << x[i];
      }
    }
  }
}

// The error bound the format gives: within a block of largest magnitude A, FP4 is off by at most
// A/3 (half the widest gap, 1 of 6, at a scale up to twice A/6), FP8 by at most A/16.
TEST(OuterGradCodec, ErrorWithinTheFormatsBound) {
  std::mt19937 rng(8);
  const std::vector<float> x = random_values(rng, 4096);
  for (int bits : {4, 8}) {
    std::vector<uint8_t> bytes(outer_grad_encoded_bytes(x.size(), bits));
    encode_outer_grad(x, bits, bytes, "test");
    std::vector<float> y(x.size(), 0.0f);
    decode_add_outer_grad(bytes, bits, y);
    for (size_t b = 0; b < x.size(); b += kOuterGradBlock) {
      float amax = 0;
      for (size_t i = b; i < b + kOuterGradBlock; ++i) amax = std::max(amax, std::fabs(x[i]));
      const float bound = bits == 4 ? amax / 3 : amax / 16;
      for (size_t i = b; i < b + kOuterGradBlock; ++i) {
        ASSERT_LE(std::fabs(y[i] - x[i]), bound) << "bits " << bits << " i " << i;
      }
    }
  }
}

TEST(OuterGradCodec, DecodeAddsIntoTheAccumulator) {
  std::mt19937 rng(9);
  const std::vector<float> x = random_values(rng, 100);
  std::vector<float> acc = random_values(rng, 100), start = acc;
  std::vector<uint8_t> bytes(outer_grad_encoded_bytes(x.size(), 4));
  encode_outer_grad(x, 4, bytes, "test");
  decode_add_outer_grad(bytes, 4, acc);
  const std::vector<float> decoded = reference_decode(x, 4);
  for (size_t i = 0; i < x.size(); ++i) EXPECT_EQ(acc[i], start[i] + decoded[i]) << i;
}

// Long inputs run in chunks on the pool: the bytes and sums are the same on any thread count,
// and the chunked result is the definition's.
TEST(OuterGradCodec, ChunkedOnThePoolAndThreadCountInvariant) {
  std::mt19937 rng(10);
  const std::vector<float> x = random_values(rng, 200003);
  std::vector<std::vector<uint8_t>> bytes;
  std::vector<std::vector<float>> sums;
  for (int threads : {1, 2, 3}) {
    ThreadPool pool(threads);
    ThreadPool::Use use(pool);
    bytes.emplace_back(outer_grad_encoded_bytes(x.size(), 4));
    encode_outer_grad(x, 4, bytes.back(), "test");
    sums.emplace_back(x.size(), 0.0f);
    decode_add_outer_grad(bytes.back(), 4, sums.back());
  }
  EXPECT_EQ(bytes[0], bytes[1]);
  EXPECT_EQ(bytes[0], bytes[2]);
  EXPECT_EQ(sums[0], sums[2]);
  EXPECT_EQ(sums[0], reference_decode(x, 4));
}

TEST(OuterGradCodec, ZerosAndExtremes) {
  std::vector<float> x(40, 0.0f);
  x[35] = 1e36f;  // the largest accepted
  x[36] = -1e36f;
  x[37] = std::numeric_limits<float>::denorm_min();
  for (int bits : {4, 8}) {
    std::vector<uint8_t> bytes(outer_grad_encoded_bytes(x.size(), bits));
    encode_outer_grad(x, bits, bytes, "test");
    std::vector<float> y(x.size(), 0.0f);
    decode_add_outer_grad(bytes, bits, y);
    for (size_t i = 0; i < 32; ++i) EXPECT_EQ(y[i], 0.0f);
    EXPECT_TRUE(std::isfinite(y[35]));
    EXPECT_GT(y[35], 0.5e36f);
    EXPECT_LT(y[36], -0.5e36f);
    EXPECT_EQ(y[37], 0.0f);  // far below the block's scale
  }
}

TEST(OuterGradCodec, NonFiniteIsAnError) {
  for (float bad :
       {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(), -2e36f}) {
    std::vector<float> x(10, 1.0f);
    x[7] = bad;
    std::vector<uint8_t> bytes(outer_grad_encoded_bytes(x.size(), 4));
    try {
      encode_outer_grad(x, 4, bytes, "fragment 1");
      FAIL() << "no error";
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find("fragment 1"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("element 7"), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace nanogpt
