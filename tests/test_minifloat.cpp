// The small float formats of kernels/minifloat.hpp (FP8 E4M3 and E5M2, FP4 E2M1), each checked
// against its definition written down independently here.
#include "kernels/fp4.hpp"
#include "kernels/fp8.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <bit>
#include <cmath>
#include <cstdio>
#include <limits>
#include <mutex>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "support/float_bits.hpp"

namespace nanogpt {
namespace {

// The exhaustive sweep visits every float32 bit pattern in optimized builds (~5 s per format on
// 2 cores). Sanitizers make it ~7x slower and -O0 ~25x, so those builds visit every 7th or
// 31st pattern instead (odd strides, so every low-mantissa residue is still hit); the ties and
// range boundaries are tested one by one separately, so no build skips them.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define NANOGPT_FP8_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(undefined_behavior_sanitizer) || \
    __has_feature(memory_sanitizer) || __has_feature(thread_sanitizer)
#define NANOGPT_FP8_SANITIZED 1
#endif
#endif
#if !defined(__OPTIMIZE__)
constexpr uint64_t kSweepStride = 31;
#elif defined(NANOGPT_FP8_SANITIZED)
constexpr uint64_t kSweepStride = 7;
#else
constexpr uint64_t kSweepStride = 1;
#endif

// The formats written down from their definitions, independently of the implementation.
struct FormatDefinition {
  int code_bits;
  int exponent_bits;
  int mantissa_bits;
  int bias;
  // E5M2: an all-ones exponent is inf (mantissa 0) or NaN. E4M3fn: only S.1111.111 is NaN and
  // the other all-ones-exponent codes are ordinary finite values.
  bool ieee_specials;
  bool has_nan;  // E2M1 has none: every code is a finite value
  unsigned sign_bit() const { return 1u << (code_bits - 1); }
  unsigned codes() const { return 1u << code_bits; }
};

constexpr FormatDefinition kE4M3Definition{8, 4, 3, 7, false, true};
constexpr FormatDefinition kE5M2Definition{8, 5, 2, 15, true, true};
constexpr FormatDefinition kE2M1Definition{4, 2, 1, 1, false, false};

double definition_value(const FormatDefinition& f, unsigned code) {
  const bool negative = (code & f.sign_bit()) != 0;
  const unsigned exponent_mask = (1u << f.exponent_bits) - 1;
  const unsigned mantissa_mask = (1u << f.mantissa_bits) - 1;
  const unsigned exponent = (code >> f.mantissa_bits) & exponent_mask;
  const unsigned mantissa = code & mantissa_mask;
  double v;
  if (f.ieee_specials && exponent == exponent_mask) {
    v = mantissa == 0 ? std::numeric_limits<double>::infinity()
                      : std::numeric_limits<double>::quiet_NaN();
  } else if (f.has_nan && !f.ieee_specials && exponent == exponent_mask &&
             mantissa == mantissa_mask) {
    v = std::numeric_limits<double>::quiet_NaN();
  } else if (exponent == 0) {
    v = std::ldexp(static_cast<double>(mantissa), 1 - f.bias - f.mantissa_bits);
  } else {
    v = std::ldexp(static_cast<double>((1u << f.mantissa_bits) + mantissa),
                   static_cast<int>(exponent) - f.bias - f.mantissa_bits);
  }
  return negative ? -v : v;
}

struct Table {
  std::vector<double> value;  // by code
  // Finite non-negative values in increasing order, with their codes.
  std::vector<std::pair<double, uint8_t>> ladder;
  double max_finite = 0;
  uint8_t max_code = 0;
  uint8_t sign_bit = 0;
  bool has_nan = true;
};

Table build_table(const FormatDefinition& f) {
  Table t;
  t.sign_bit = static_cast<uint8_t>(f.sign_bit());
  t.has_nan = f.has_nan;
  for (unsigned c = 0; c < f.codes(); ++c) t.value.push_back(definition_value(f, c));
  for (unsigned c = 0; c < f.sign_bit(); ++c) {
    if (std::isfinite(t.value[c])) t.ladder.emplace_back(t.value[c], static_cast<uint8_t>(c));
  }
  std::sort(t.ladder.begin(), t.ladder.end());
  t.max_finite = t.ladder.back().first;
  t.max_code = t.ladder.back().second;
  return t;
}

const Table& e4m3_table() {
  static const Table t = build_table(kE4M3Definition);
  return t;
}
const Table& e5m2_table() {
  static const Table t = build_table(kE5M2Definition);
  return t;
}
const Table& e2m1_table() {
  static const Table t = build_table(kE2M1Definition);
  return t;
}

using test::bits_of;

std::string hex_float(float x) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%a (0x%08x)", static_cast<double>(x), bits_of(x));
  return buf;
}

std::string hex_code(uint8_t code) {
  char buf[8];
  std::snprintf(buf, sizeof buf, "0x%02x", code);
  return buf;
}

// The code the definition requires for x: nearest value, ties to the even code, saturating to
// the largest finite value. Not for NaN.
uint8_t expected_code(const Table& t, float x) {
  const double a = std::fabs(static_cast<double>(x));
  uint8_t code;
  if (a >= t.max_finite) {
    code = t.max_code;
  } else {
    auto hi = std::upper_bound(t.ladder.begin(), t.ladder.end(), std::make_pair(a, uint8_t{255}));
    auto lo = hi - 1;
    const double mid = (lo->first + hi->first) / 2;
    if (a < mid) {
      code = lo->second;
    } else if (a > mid) {
      code = hi->second;
    } else {
      code = (lo->second & 1u) == 0 ? lo->second : hi->second;
    }
  }
  return std::signbit(x) ? static_cast<uint8_t>(code | t.sign_bit) : code;
}

TEST(Fp8, DefinitionTablesHaveTheDocumentedRange) {
  const Table& e4 = e4m3_table();
  EXPECT_EQ(e4.max_finite, 448.0);
  EXPECT_EQ(e4.max_code, 0x7e);
  EXPECT_EQ(e4.ladder[1].first, std::ldexp(1.0, -9));
  EXPECT_EQ(e4.ladder.size(), 127u);  // 0x00..0x7e
  EXPECT_EQ(std::count_if(e4.value.begin(), e4.value.end(), [](double v) { return std::isnan(v); }),
            2);
  const Table& e5 = e5m2_table();
  EXPECT_EQ(e5.max_finite, 57344.0);
  EXPECT_EQ(e5.max_code, 0x7b);
  EXPECT_EQ(e5.ladder[1].first, std::ldexp(1.0, -16));
  EXPECT_EQ(e5.ladder.size(), 124u);  // 0x00..0x7b
  EXPECT_EQ(std::count_if(e5.value.begin(), e5.value.end(), [](double v) { return std::isinf(v); }),
            2);
  EXPECT_EQ(std::count_if(e5.value.begin(), e5.value.end(), [](double v) { return std::isnan(v); }),
            6);
}

void check_decode(const Table& t, float (*decode)(uint8_t)) {
  for (unsigned c = 0; c < t.value.size(); ++c) {
    const float got = decode(static_cast<uint8_t>(c));
    if (std::isnan(t.value[c])) {
      EXPECT_TRUE(std::isnan(got)) << "code " << c;
    } else {
      EXPECT_EQ(static_cast<double>(got), t.value[c]) << "code " << c;
      EXPECT_EQ(std::signbit(got), std::signbit(t.value[c])) << "code " << c;
    }
  }
}

TEST(Fp8, E4M3DecodeMatchesDefinition) {
  check_decode(e4m3_table(), e4m3_to_float);
}
TEST(Fp8, E5M2DecodeMatchesDefinition) {
  check_decode(e5m2_table(), e5m2_to_float);
}

TEST(Fp8, KnownValues) {
  EXPECT_EQ(float_to_e4m3(1.0f), 0x38);
  EXPECT_EQ(float_to_e4m3(-2.0f), 0xc0);
  EXPECT_EQ(float_to_e4m3(448.0f), 0x7e);
  EXPECT_EQ(float_to_e4m3(1e9f), 0x7e);
  EXPECT_EQ(float_to_e4m3(-std::numeric_limits<float>::infinity()), 0xfe);
  EXPECT_EQ(float_to_e4m3(0.0f), 0x00);
  EXPECT_EQ(float_to_e4m3(-0.0f), 0x80);
  EXPECT_EQ(float_to_e4m3(std::ldexp(1.0f, -9)), 0x01);
  EXPECT_EQ(float_to_e4m3(std::ldexp(1.0f, -10)), 0x00);   // tie, to even zero
  EXPECT_EQ(float_to_e4m3(std::ldexp(3.0f, -10)), 0x02);   // tie between 1 and 2 steps
  EXPECT_EQ(float_to_e4m3(-std::ldexp(1.0f, -11)), 0x80);  // underflow keeps the sign
  EXPECT_EQ(float_to_e4m3(std::numeric_limits<float>::quiet_NaN()) & 0x7f, 0x7f);
  EXPECT_EQ(float_to_e5m2(1.0f), 0x3c);
  EXPECT_EQ(float_to_e5m2(57344.0f), 0x7b);
  EXPECT_EQ(float_to_e5m2(61440.0f), 0x7b);  // would round to inf without saturation
  EXPECT_EQ(float_to_e5m2(std::numeric_limits<float>::infinity()), 0x7b);
  EXPECT_EQ(float_to_e5m2(std::ldexp(1.0f, -16)), 0x01);
  EXPECT_TRUE(std::isnan(e5m2_to_float(float_to_e5m2(std::numeric_limits<float>::quiet_NaN()))));
  EXPECT_EQ(e4m3_to_float(0x7e), kE4M3Max);
  EXPECT_EQ(e5m2_to_float(0x7b), kE5M2Max);
  EXPECT_TRUE(std::isinf(e5m2_to_float(0x7c)));
}

// A run of consecutive positive float32 bit patterns that must all encode to `code`.
struct Segment {
  uint32_t begin;
  uint32_t end;
  uint8_t code;
};

constexpr uint32_t kPositiveInfBits = 0x7f800000u;

// Positive float32 bit order is value order, so the definition's rounding splits the patterns
// [+0, +inf] into runs of one code, cut at the midpoints between adjacent values; each midpoint
// is a run of one pattern taking the even code, and everything from the last midpoint up to
// +inf saturates to the largest finite code.
std::vector<Segment> rounding_segments(const Table& t) {
  std::vector<Segment> segments;
  const auto& ladder = t.ladder;
  uint32_t start = 0;
  for (size_t j = 0; j + 1 < ladder.size(); ++j) {
    const double mid = (ladder[j].first + ladder[j + 1].first) / 2;
    const auto mid_float = static_cast<float>(mid);
    if (static_cast<double>(mid_float) != mid) throw std::logic_error("midpoint not a float");
    const uint32_t m = bits_of(mid_float);
    const uint8_t even = (ladder[j].second & 1u) == 0 ? ladder[j].second : ladder[j + 1].second;
    segments.push_back({start, m, ladder[j].second});
    segments.push_back({m, m + 1, even});
    start = m + 1;
  }
  segments.push_back({start, kPositiveInfBits + 1, t.max_code});
  return segments;
}

constexpr uint32_t first_visited(uint32_t begin) {
  return static_cast<uint32_t>((uint64_t{begin} + kSweepStride - 1) / kSweepStride * kSweepStride);
}

// Branch-free so the compiler vectorizes it; a sweep of 2^31 patterns is otherwise too slow.
template <uint8_t (*Encode)(float), float (*Round)(float)>
uint32_t count_mismatches(uint32_t begin, uint32_t end, uint8_t code, uint8_t code_negative,
                          uint32_t want, uint32_t want_negative) {
  uint32_t bad = 0;
  for (uint32_t u = first_visited(begin); u < end; u += kSweepStride) {
    const float x = std::bit_cast<float>(u);
    const float negative = std::bit_cast<float>(u | 0x80000000u);
    bad += static_cast<uint32_t>((Encode(x) != code) | (Encode(negative) != code_negative) |
                                 (bits_of(Round(x)) != want) |
                                 (bits_of(Round(negative)) != want_negative));
  }
  return bad;
}

// Only runs after a failure, to say which inputs failed.
template <uint8_t (*Encode)(float), float (*Round)(float)>
std::vector<std::string> describe_mismatches(const Table& t, uint32_t begin, uint32_t end,
                                             uint8_t code) {
  std::vector<std::string> out;
  for (uint32_t u = first_visited(begin); u < end && out.size() < 4; u += kSweepStride) {
    for (uint32_t sign : {0u, 0x80000000u}) {
      const float x = std::bit_cast<float>(u | sign);
      const auto want = static_cast<uint8_t>(sign != 0 ? code | t.sign_bit : code);
      const auto want_value = static_cast<float>(t.value[want]);
      if (Encode(x) != want || bits_of(Round(x)) != bits_of(want_value)) {
        out.push_back(hex_float(x) + ": encoded " + hex_code(Encode(x)) + " rounded " +
                      hex_float(Round(x)) + ", expected " + hex_code(want) + " " +
                      hex_float(want_value));
      }
    }
  }
  return out;
}

template <uint8_t (*Encode)(float), float (*Round)(float)>
void exhaustive_sweep(const Table& t) {
  const std::vector<Segment> segments = rounding_segments(t);
  // Fixed-size chunks handed out dynamically: the runs differ in length by orders of magnitude.
  constexpr uint32_t kChunks = 512;
  constexpr uint64_t kFinitePatterns = uint64_t{kPositiveInfBits} + 1;
  std::atomic<uint32_t> next_chunk{0};
  std::atomic<uint64_t> checked{0};
  std::mutex failures_mutex;
  std::vector<std::string> failures;

  auto worker = [&] {
    uint64_t local_checked = 0;
    for (uint32_t c = next_chunk++; c < kChunks; c = next_chunk++) {
      const auto chunk_begin = static_cast<uint32_t>(kFinitePatterns * c / kChunks);
      const auto chunk_end = static_cast<uint32_t>(kFinitePatterns * (c + 1) / kChunks);
      for (const Segment& s : segments) {
        const uint32_t begin = std::max(s.begin, chunk_begin);
        const uint32_t end = std::min(s.end, chunk_end);
        if (begin >= end) continue;
        const uint32_t first = first_visited(begin);
        if (first < end) local_checked += (end - 1 - first) / kSweepStride + 1;
        const uint32_t want = bits_of(static_cast<float>(t.value[s.code]));
        const auto negative = static_cast<uint8_t>(s.code | t.sign_bit);
        const uint32_t want_negative = bits_of(static_cast<float>(t.value[negative]));
        if (count_mismatches<Encode, Round>(begin, end, s.code, negative, want, want_negative) !=
            0) {
          auto found = describe_mismatches<Encode, Round>(t, begin, end, s.code);
          std::lock_guard<std::mutex> lock(failures_mutex);
          failures.insert(failures.end(), found.begin(), found.end());
        }
      }
    }
    checked += local_checked;
  };
  const unsigned threads = std::max(1u, std::thread::hardware_concurrency());
  std::vector<std::thread> pool;
  for (unsigned i = 0; i < threads; ++i) pool.emplace_back(worker);
  for (auto& th : pool) th.join();

  // NaN inputs: any NaN code is acceptable. A format without NaN has no rule for them (its
  // callers never encode one), but they are counted as visited.
  for (uint32_t u = first_visited(kPositiveInfBits + 1); u < 0x80000000u; u += kSweepStride) {
    if (!t.has_nan) {
      checked += 1;
      continue;
    }
    for (uint32_t sign : {0u, 0x80000000u}) {
      const float x = std::bit_cast<float>(u | sign);
      if (!std::isnan(t.value[Encode(x)]) || !std::isnan(Round(x))) {
        if (failures.size() < 16) failures.push_back(hex_float(x) + ": NaN not kept");
      }
    }
    checked += 1;
  }

  for (size_t i = 0; i < std::min<size_t>(failures.size(), 16); ++i) ADD_FAILURE() << failures[i];
  EXPECT_TRUE(failures.empty());
  EXPECT_EQ(checked.load(), ((uint64_t{1} << 31) + kSweepStride - 1) / kSweepStride);
  ::testing::Test::RecordProperty("float32_patterns_checked", std::to_string(2 * checked.load()));
}

TEST(Fp8, E4M3EncodeExhaustive) {
  exhaustive_sweep<float_to_e4m3, round_to_e4m3>(e4m3_table());
}
TEST(Fp8, E5M2EncodeExhaustive) {
  exhaustive_sweep<float_to_e5m2, round_to_e5m2>(e5m2_table());
}
TEST(Fp4, E2M1EncodeExhaustive) {
  exhaustive_sweep<float_to_e2m1, round_to_e2m1>(e2m1_table());
}

// Every tie and rounding boundary, which a strided sweep could skip.
template <uint8_t (*Encode)(float), float (*Round)(float)>
void check_boundaries(const Table& t) {
  std::vector<float> probes;
  const auto& ladder = t.ladder;
  for (size_t j = 0; j + 1 < ladder.size(); ++j) {
    const float mid = static_cast<float>((ladder[j].first + ladder[j + 1].first) / 2);
    ASSERT_EQ(static_cast<double>(mid), (ladder[j].first + ladder[j + 1].first) / 2);
    for (float p : {mid, std::nextafter(mid, 0.0f), std::nextafter(mid, INFINITY),
                    static_cast<float>(ladder[j].first)}) {
      probes.push_back(p);
    }
  }
  const float max = static_cast<float>(t.max_finite);
  for (float p : {max, std::nextafter(max, INFINITY), std::nextafter(max, 0.0f), 2 * max,
                  std::numeric_limits<float>::max(), std::numeric_limits<float>::infinity(),
                  std::numeric_limits<float>::denorm_min(), std::numeric_limits<float>::min()}) {
    probes.push_back(p);
  }
  for (float p : probes) {
    for (float x : {p, -p}) {
      const uint8_t want = expected_code(t, x);
      EXPECT_EQ(Encode(x), want) << hex_float(x);
      EXPECT_EQ(bits_of(Round(x)), bits_of(static_cast<float>(t.value[want]))) << hex_float(x);
    }
  }
}

TEST(Fp8, E4M3TiesAndBoundaries) {
  check_boundaries<float_to_e4m3, round_to_e4m3>(e4m3_table());
}
TEST(Fp8, E5M2TiesAndBoundaries) {
  check_boundaries<float_to_e5m2, round_to_e5m2>(e5m2_table());
}
TEST(Fp4, E2M1TiesAndBoundaries) {
  check_boundaries<float_to_e2m1, round_to_e2m1>(e2m1_table());
}

TEST(Fp4, DefinitionAndDecode) {
  const Table& t = e2m1_table();
  const std::vector<double> magnitudes = {0, 0.5, 1, 1.5, 2, 3, 4, 6};
  ASSERT_EQ(t.ladder.size(), magnitudes.size());
  for (size_t i = 0; i < magnitudes.size(); ++i) {
    EXPECT_EQ(t.ladder[i].first, magnitudes[i]);
    EXPECT_EQ(t.ladder[i].second, i);  // codes 0..7 in value order
  }
  EXPECT_EQ(t.max_finite, static_cast<double>(kE2M1Max));
  check_decode(t, e2m1_to_float);
  for (unsigned c = 0; c < 16; ++c) {
    const auto code = static_cast<uint8_t>(c);
    EXPECT_EQ(float_to_e2m1(e2m1_to_float(code)), code) << c;  // -0 keeps its code 0x8
  }
  EXPECT_EQ(float_to_e2m1(0.25f), 0x0);    // tie between 0 and 0.5: even
  EXPECT_EQ(float_to_e2m1(0.75f), 0x2);    // tie between 0.5 and 1: even (1)
  EXPECT_EQ(float_to_e2m1(2.5f), 0x4);     // tie between 2 and 3: even (2)
  EXPECT_EQ(float_to_e2m1(5.0f), 0x6);     // tie between 4 and 6: even (4)
  EXPECT_EQ(float_to_e2m1(-100.0f), 0xf);  // saturates
  EXPECT_EQ(float_to_e2m1(-std::numeric_limits<float>::infinity()), 0xf);
}

TEST(Fp8, EveryCodeRoundTrips) {
  for (unsigned c = 0; c < 256; ++c) {
    const auto code = static_cast<uint8_t>(c);
    if (!std::isnan(e4m3_table().value[c])) {
      EXPECT_EQ(float_to_e4m3(e4m3_to_float(code)), code);
    }
    const double v5 = e5m2_table().value[c];
    if (std::isfinite(v5)) {
      EXPECT_EQ(float_to_e5m2(e5m2_to_float(code)), code);
    } else if (std::isinf(v5)) {
      EXPECT_EQ(float_to_e5m2(e5m2_to_float(code)), (c & 0x80u) | 0x7bu);  // saturates
    }
  }
}

std::vector<float> random_inputs(std::mt19937& rng, size_t n) {
  std::vector<float> x(n);
  std::uniform_int_distribution<uint32_t> any_bits;
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_int_distribution<int> exponent(-30, 30);
  std::uniform_int_distribution<int> kind(0, 9);
  for (auto& v : x) {
    switch (kind(rng)) {
      case 0:
        v = std::bit_cast<float>(any_bits(rng));  // includes NaN, inf, subnormals
        break;
      case 1:
        v = std::numeric_limits<float>::infinity() * (normal(rng) < 0 ? -1.0f : 1.0f);
        break;
      case 2:
        v = normal(rng) < 0 ? -0.0f : 0.0f;
        break;
      default:
        v = std::ldexp(normal(rng), exponent(rng));
        break;
    }
  }
  return x;
}

template <void (*Quantize)(const float*, float, float*, size_t), uint8_t (*Encode)(float),
          float (*Decode)(uint8_t)>
void check_bulk_against_scalar() {
  std::mt19937 rng(12345);
  std::uniform_int_distribution<size_t> length(0, 300);
  std::uniform_int_distribution<size_t> skew(0, 7);
  const float scales[] = {
      1.0f, 0.5f, 1.0f / 448.0f, 3.3f, 1e-4f, 1e4f, std::ldexp(1.0f, -20), 7.25f, 1.0f / 57344.0f};
  size_t compared = 0;
  for (int trial = 0; trial < 400; ++trial) {
    const size_t n = length(rng);
    const size_t offset = skew(rng);  // misaligned starts exercise the vector loop's edges
    std::vector<float> x = random_inputs(rng, n + offset);
    const float inv_scale = scales[static_cast<size_t>(trial) % std::size(scales)];
    std::vector<float> out(n + offset, -1.0f);
    Quantize(x.data() + offset, inv_scale, out.data() + offset, n);
    for (size_t i = 0; i < n; ++i) {
      const float xi = x[offset + i];
      const float want = Decode(Encode(xi * inv_scale));
      const float got = out[offset + i];
      ++compared;
      if (std::isnan(want)) {
        ASSERT_TRUE(std::isnan(got)) << hex_float(xi) << " * " << inv_scale;
      } else {
        ASSERT_EQ(bits_of(got), bits_of(want)) << hex_float(xi) << " * " << inv_scale;
      }
    }
    for (size_t i = 0; i < offset; ++i) ASSERT_EQ(out[i], -1.0f) << "wrote before the output";
    // In place gives the same result.
    std::vector<float> in_place(x.begin() + static_cast<ptrdiff_t>(offset), x.end());
    Quantize(in_place.data(), inv_scale, in_place.data(), n);
    for (size_t i = 0; i < n; ++i) {
      const float got = out[offset + i];
      ASSERT_TRUE(bits_of(in_place[i]) == bits_of(got) ||
                  (std::isnan(in_place[i]) && std::isnan(got)));
    }
  }
  EXPECT_GT(compared, 10000u);
}

TEST(Fp8, E4M3BulkMatchesScalar) {
  check_bulk_against_scalar<quantize_e4m3, float_to_e4m3, e4m3_to_float>();
}
TEST(Fp8, E5M2BulkMatchesScalar) {
  check_bulk_against_scalar<quantize_e5m2, float_to_e5m2, e5m2_to_float>();
}

}  // namespace
}  // namespace nanogpt
