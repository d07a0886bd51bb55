// fp32 → bf16 conversion: to_bf16 against a reference written from the definition (nearest
// value, ties to the even mantissa, overflow to infinity, NaN stays NaN, denormals to zero) over
// random and targeted bit patterns and on every special class, and the rounding's vector form
// (gemm/bf16_avx512.hpp), the VCVTNEPS2BF16 instruction and the vectorised roundings (packers,
// GEMM epilogue, the streamed rows) against to_bf16 bit for bit.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "kernels/bf16.hpp"
#include "kernels/gemm/bf16_avx512.hpp"
#include "kernels/gemm/epilogue.hpp"
#include "kernels/gemm/layout.hpp"
#include "kernels/gemm/microkernel.hpp"
#include "kernels/gemm/pack.hpp"
#include "kernels/streamed_store.hpp"
#include "kernels/target.hpp"
#include "runtime/cpu_info.hpp"
#include "support/float_bits.hpp"

NANOGPT_ALLOW_AVX512_INTRINSICS

namespace nanogpt {
namespace {

using test::from_bits;

// The bf16 nearest to the fp32 with bits u, by comparing distances to the two candidates; a
// denormal is flushed to a zero of its sign first (as VCVTNE2PS2BF16 does).
uint16_t reference_bf16(uint32_t u) {
  if ((u & 0x7F800000u) == 0) return static_cast<uint16_t>((u & 0x80000000u) >> 16);
  const uint32_t sign = u & 0x80000000u, mag = u & 0x7FFFFFFFu;
  const uint32_t down = mag & 0xFFFF0000u, up = down + 0x10000u;
  const double x = std::fabs(static_cast<double>(from_bits(mag)));
  if (mag == down) return static_cast<uint16_t>(u >> 16);  // exact, or infinity
  // The value one step up; past the largest finite bf16 it is 2^128 (rounds to infinity).
  const double hi = up >= 0x7F800000u ? std::ldexp(1.0, 128) : from_bits(up);
  const double lo = from_bits(down);
  uint32_t pick;
  if (x - lo < hi - x) {
    pick = down;
  } else if (hi - x < x - lo) {
    pick = up;
  } else {
    pick = (down & 0x10000u) == 0 ? down : up;  // a tie: the even mantissa
  }
  return static_cast<uint16_t>((sign | pick) >> 16);
}

void check_one(uint32_t u) {
  const float f = from_bits(u);
  const bf16 got = to_bf16(f);
  if (std::isnan(f)) {
    ASSERT_TRUE(std::isnan(to_float(got))) << std::hex << u;
    ASSERT_EQ(got.bits & 0x8000u, (u >> 16) & 0x8000u) << "sign of NaN " << std::hex << u;
    ASSERT_NE(got.bits & 0x0040u, 0u) << "quiet NaN " << std::hex << u;
    return;
  }
  ASSERT_EQ(got.bits, reference_bf16(u)) << std::hex << "bits " << u;
  ASSERT_EQ(round_to_bf16(f), to_float(got));
}

std::vector<uint32_t> test_patterns() {
  std::vector<uint32_t> out;
  std::mt19937 rng(2024);
  for (int i = 0; i < 1 << 20; ++i) out.push_back(static_cast<uint32_t>(rng()));
  for (uint32_t sign : {0u, 0x80000000u}) {
    for (uint32_t top : {0x0000u, 0x0001u, 0x007Fu, 0x0080u, 0x3F80u, 0x3F81u, 0x7F7Fu, 0x7F80u,
                         0x7FC0u, 0x7F81u}) {
      for (uint32_t low : {0x0000u, 0x0001u, 0x7FFFu, 0x8000u, 0x8001u, 0xFFFFu}) {
        out.push_back(sign | top << 16 | low);
      }
    }
  }
  for (int i = 0; i < 1 << 16; ++i) {  // denormals, ties among them too
    out.push_back(static_cast<uint32_t>(rng()) & 0x807FFFFFu);
    out.push_back((static_cast<uint32_t>(rng()) & 0x807F0000u) | 0x8000u);
  }
  return out;
}

TEST(Bf16, RoundsToNearestEvenLikeTheDefinition) {
  for (uint32_t u : test_patterns()) {
    check_one(u);
    if (HasFatalFailure()) return;
  }
  EXPECT_EQ(to_bf16(1.0f).bits, 0x3F80);
  EXPECT_EQ(to_bf16(from_bits(0x3F808000u)).bits, 0x3F80);  // tie, even stays
  EXPECT_EQ(to_bf16(from_bits(0x3F818000u)).bits, 0x3F82);  // tie, odd rounds up
  EXPECT_EQ(to_bf16(from_bits(0x7F7FFFFFu)).bits, 0x7F80);  // max float: to infinity
  EXPECT_EQ(to_bf16(INFINITY).bits, 0x7F80);
  EXPECT_EQ(to_bf16(-INFINITY).bits, 0xFF80);
  EXPECT_EQ(to_bf16(from_bits(0x00000001u)).bits, 0x0000);  // denormals: a zero of their sign
  EXPECT_EQ(to_bf16(from_bits(0x007FFFFFu)).bits, 0x0000);
  EXPECT_EQ(to_bf16(from_bits(0x80018000u)).bits, 0x8000);
  EXPECT_EQ(to_bf16(from_bits(0x00800000u)).bits, 0x0080);  // the smallest normal stays
}

// Every class of fp32 the rounding treats differently, in both signs.
std::vector<std::pair<std::string, uint32_t>> special_classes() {
  const std::pair<const char*, uint32_t> classes[] = {
      {"zero", 0x00000000u},
      {"smallest denormal", 0x00000001u},
      {"denormal with a tie in its low half", 0x00018000u},
      {"largest denormal", 0x007FFFFFu},
      {"smallest normal", 0x00800000u},
      {"exact bf16", 0x3F800000u},
      {"below a tie", 0x3F807FFFu},
      {"tie, even mantissa kept", 0x3F808000u},
      {"above a tie", 0x3F808001u},
      {"tie, odd mantissa rounds up", 0x3F818000u},
      {"carry into the exponent", 0x3FFFFFFFu},
      {"largest value rounding down", 0x7F7F7FFFu},
      {"largest finite (rounds to infinity)", 0x7F7FFFFFu},
      {"infinity", 0x7F800000u},
      {"signalling NaN, payload in the low half", 0x7F800001u},
      {"signalling NaN, payload in the high half", 0x7FBF0000u},
      {"quiet NaN", 0x7FC00000u},
      {"NaN, all payload bits", 0x7FFFFFFFu},
  };
  std::vector<std::pair<std::string, uint32_t>> out;
  for (const auto& [name, bits] : classes) {
    out.emplace_back(std::string("+") + name, bits);
    out.emplace_back(std::string("-") + name, bits | 0x80000000u);
  }
  return out;
}

// The vector form (bf16_avx512.hpp) on n values, n a multiple of 16.
NANOGPT_TARGET_AVX512 void vector_form(const uint32_t* in, uint16_t* out, size_t n) {
  for (size_t i = 0; i < n; i += 16) {
    const __m512i hi = bf16_round_hi(_mm512_loadu_si512(in + i));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i),
                        _mm512_cvtepi32_epi16(_mm512_srli_epi32(hi, 16)));
  }
}

// The instruction (VCVTNEPS2BF16) on n values, n a multiple of 16.
NANOGPT_TARGET_AVX512BF16 void instruction(const uint32_t* in, uint16_t* out, size_t n) {
  for (size_t i = 0; i < n; i += 16) {
    const __m256bh h = _mm512_cvtneps_pbh(_mm512_castsi512_ps(_mm512_loadu_si512(in + i)));
    std::memcpy(out + i, &h, sizeof h);
  }
}

TEST(Bf16, SpecialClassesRoundAsDefined) {
  for (const auto& [name, u] : special_classes()) {
    const uint16_t got = to_bf16_bits(from_bits(u));
    const bool nan = (u & 0x7FFFFFFFu) > 0x7F800000u;
    // A NaN keeps its sign and top payload bits and is quieted; the rest as the definition says.
    const uint16_t want = nan ? static_cast<uint16_t>((u >> 16) | 0x0040u) : reference_bf16(u);
    EXPECT_EQ(got, want) << name << std::hex << " bits " << u;
  }
}

// The two forms of the one rounding and the instruction agree bit for bit on every special
// class and on random and targeted bit patterns (test_patterns: 2^20 random, denormals, ties).
TEST(Bf16, ScalarVectorAndInstructionFormsAgreeBitForBit) {
  const CpuInfo& cpu = cpu_info();
  if (!cpu.avx512f) GTEST_SKIP() << "no AVX-512F for the vector form";
  std::vector<uint32_t> in;
  std::vector<std::string> names;
  for (const auto& [name, u] : special_classes()) {
    in.push_back(u);
    names.push_back(name);
  }
  for (uint32_t u : test_patterns()) {
    in.push_back(u);
    names.push_back("pattern");
  }
  while (in.size() % 16 != 0) {
    in.push_back(0x3F808000u);
    names.push_back("tie");
  }
  std::vector<uint16_t> vec(in.size()), hw(in.size());
  vector_form(in.data(), vec.data(), in.size());
  if (cpu.avx512_bf16) instruction(in.data(), hw.data(), in.size());
  for (size_t i = 0; i < in.size(); ++i) {
    const uint16_t scalar = to_bf16_bits(from_bits(in[i]));
    ASSERT_EQ(vec[i], scalar) << names[i] << std::hex << " bits " << in[i];
    if (cpu.avx512_bf16) {
      ASSERT_EQ(hw[i], scalar) << names[i] << std::hex << " bits " << in[i];
    }
  }
}

// The row form (the clone for this CPU) against the scalar one, on every special class and the
// random and targeted patterns, at lengths and offsets that leave partial vectors.
TEST(Bf16, RowRoundingMatchesScalarBitForBit) {
  std::vector<float> x;
  for (const auto& [name, u] : special_classes()) x.push_back(from_bits(u));
  for (uint32_t u : test_patterns()) x.push_back(from_bits(u));
  std::vector<bf16> out(x.size());
  for (const size_t offset : {size_t{0}, size_t{3}}) {
    const int64_t n = static_cast<int64_t>(x.size() - offset - 5);
    std::fill(out.begin(), out.end(), bf16{0x5555});
    round_to_bf16(x.data() + offset, n, out.data() + offset);
    for (size_t i = 0; i < x.size(); ++i) {
      const bool inside = i >= offset && i < offset + static_cast<size_t>(n);
      const uint16_t want = inside ? to_bf16_bits(x[i]) : uint16_t{0x5555};
      ASSERT_EQ(out[i].bits, want) << "at " << i << " offset " << offset;
    }
  }
}

// The streamed form (non-temporal stores from the first 32-byte aligned output, the plain
// rounding before and after) against the scalar one, at every alignment of the output within
// 32 bytes and lengths that end inside the head, at a chunk's edge and inside the tail.
TEST(Bf16, StreamedRowRoundingMatchesScalarBitForBit) {
  std::vector<float> x;
  for (const auto& [name, u] : special_classes()) x.push_back(from_bits(u));
  for (uint32_t u : test_patterns()) x.push_back(from_bits(u));
  x.resize(1 << 16);
  std::vector<bf16> out(x.size() + 64);
  for (int64_t offset = 0; offset < 16; ++offset) {
    for (const int64_t n : {int64_t{0}, int64_t{1}, int64_t{7}, int64_t{16}, int64_t{31},
                            int64_t{48}, int64_t{1000}, static_cast<int64_t>(x.size()) - 3}) {
      std::fill(out.begin(), out.end(), bf16{0x5555});
      // The buffer's own alignment varies with the allocator: start from its 32-byte boundary.
      const auto base = reinterpret_cast<uintptr_t>(out.data());
      const int64_t start = static_cast<int64_t>((32 - base % 32) % 32 / sizeof(bf16)) + offset;
      round_to_bf16_streamed(x.data() + offset, n, out.data() + start);
      streamed_stores_fence();
      for (int64_t i = 0; i < static_cast<int64_t>(out.size()); ++i) {
        const bool inside = i >= start && i < start + n;
        const uint16_t want =
            inside ? to_bf16_bits(x[static_cast<size_t>(offset + i - start)]) : uint16_t{0x5555};
        ASSERT_EQ(out[static_cast<size_t>(i)].bits, want)
            << "at " << i << ", offset " << offset << ", n " << n;
      }
    }
  }
}

TEST(Bf16, VectorRoundingMatchesScalarBitForBit) {
  const CpuInfo& cpu = cpu_info();
  if (!cpu.avx512f || !cpu.avx512bw || !cpu.avx512vl) GTEST_SKIP() << "no AVX-512BW/VL";
  std::vector<uint32_t> patterns = test_patterns();
  patterns.resize(patterns.size() / 1024 * 1024);
  std::vector<float> x(patterns.size());
  for (size_t i = 0; i < x.size(); ++i) x[i] = from_bits(patterns[i]);
  auto expect_packed = [&](size_t b, int64_t r, int64_t k, uint16_t got, const char* what) {
    const uint32_t u = patterns[b + static_cast<size_t>(r * 32 + k)];
    ASSERT_EQ(got, to_bf16(from_bits(u)).bits) << what << " " << std::hex << u;
  };

  // The fp32-layout packer rounding to bf16 (integer arithmetic; any AVX-512BW CPU).
  const PanelPackFn fp32_pack =
      pack::fp32_pack_table_avx512<32>()[static_cast<size_t>(PackSource::kF32ToBf16)];
  std::vector<float> panel(1024);
  for (size_t b = 0; b < x.size(); b += 1024) {
    fp32_pack(x.data() + b, 32, Trans::kNo, 0, 32, 32, 32, panel.data());
    for (int64_t r = 0; r < 32; ++r) {
      for (int64_t k = 0; k < 32; ++k) {
        const float v = panel[static_cast<size_t>(k * 32 + r)];
        expect_packed(b, r, k, to_bf16(v).bits, "fp32 panel");
        uint32_t bits;
        std::memcpy(&bits, &v, sizeof bits);
        ASSERT_EQ(bits & 0xFFFFu, 0u) << "fp32 panel holds a bf16 value " << std::hex << bits;
      }
    }
  }

  // The pair-layout packers (VCVTNE2PS2BF16), from rows (trans kNo) and from columns (kYes).
  if (cpu.avx512_bf16) {
    const layout::Layout amx = layout::amx_a(32, 32), vnni = layout::vnni_b(32, 32, 32);
    std::vector<bf16> packed(1024);
    for (size_t b = 0; b < x.size(); b += 1024) {
      pack::amx_pack_a_f32(x.data() + b, 32, Trans::kNo, 0, 32, 32, 32, packed.data());
      for (int64_t r = 0; r < 32; ++r) {
        for (int64_t k = 0; k < 32; ++k) {
          expect_packed(b, r, k, packed[static_cast<size_t>(amx(r, k))].bits, "amx A");
        }
      }
      // B's panel holds columns of op(B), i.e. rows of Y = op(B)ᵀ read here as Y[i][k] =
      // x[k·32 + i] (k-major); the layout is indexed (k, column).
      pack::vnni_pack_b_f32(x.data() + b, 32, Trans::kYes, 0, 32, 32, 32, packed.data());
      for (int64_t i = 0; i < 32; ++i) {
        for (int64_t k = 0; k < 32; ++k) {
          expect_packed(b, k, i, packed[static_cast<size_t>(vnni(k, i))].bits, "vnni B");
        }
      }
    }
  }

  // The epilogue's cast of C (alpha = 1, beta = 0: C = acc exactly, NaN payloads kept).
  std::vector<float> c(x.size());
  std::vector<bf16> cast(x.size());
  GemmEpilogue ep;
  ep.c_bf16 = cast.data();
  ep.ld_c_bf16 = 64;
  finish_tile_avx512(x.data(), 64, static_cast<int64_t>(x.size() / 64), 61, 1.0f, 0.0f, c.data(),
                     64, &ep, 0, 0);
  for (size_t i = 0; i < x.size(); ++i) {
    if (i % 64 >= 61) continue;
    uint32_t cu;
    std::memcpy(&cu, &c[i], sizeof cu);
    ASSERT_EQ(cast[i].bits, to_bf16(c[i]).bits) << std::hex << cu;
  }
}

}  // namespace
}  // namespace nanogpt
