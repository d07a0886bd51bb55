#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "kernels/attention.hpp"
#include "kernels/attention_internal.hpp"
#include "kernels/attention_mask.hpp"
#include "kernels/bf16.hpp"
#include "kernels/gemm/microkernel.hpp"
#include "kernels/gemm/tile_gemm.hpp"
#include "kernels/matmul.hpp"
#include "runtime/error.hpp"
#include "runtime/thread_pool.hpp"
#include "runtime/workspace.hpp"
#include "support/kernels.hpp"

namespace nanogpt {
namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
// Fills the parts of a gradient buffer that belong to nobody: must survive the backward.
constexpr float kSentinel = -777.25f;

enum class Docs { kSingle, kManyShort, kTileEdge, kStartAt0And1 };

const char* name(Docs d) {
  switch (d) {
    case Docs::kSingle:
      return "single";
    case Docs::kManyShort:
      return "many-short";
    case Docs::kTileEdge:
      return "tile-edge";
    case Docs::kStartAt0And1:
      return "start-0-and-1";
  }
  return "?";
}

std::vector<int32_t> make_docs(Docs layout, int64_t T, std::mt19937& rng) {
  std::vector<int32_t> doc(static_cast<size_t>(T));
  int32_t id = 3;  // ids need not start at 0 nor be consecutive
  for (int64_t t = 0, left = 0; t < T; ++t) {
    switch (layout) {
      case Docs::kSingle:
        doc[t] = id;
        break;
      case Docs::kManyShort:
        if (left == 0) {
          id += std::uniform_int_distribution<int32_t>(1, 3)(rng);
          left = std::uniform_int_distribution<int64_t>(1, 24)(rng);
        }
        --left;
        doc[t] = id;
        break;
      case Docs::kTileEdge:  // 64 is a tile edge, 256 a tile and a mask-block edge
        doc[t] = id + (t >= 64) + (t >= 256);
        break;
      case Docs::kStartAt0And1:
        doc[t] = t == 0 ? id : id + 1;
        break;
    }
  }
  return doc;
}

// One attention problem laid out as the model lays it out: q, k, v are slices of one [T, ld]
// buffer (H query heads, then H_kv key heads, then H_kv value heads), with ld a little more than
// (H + 2·H_kv)·D so stray writes past a slice have somewhere to land.
struct Problem {
  int64_t T, H, H_kv, D, ld;
  std::vector<int32_t> doc;
  std::vector<float> qkv, dout;
  AttentionParams params;

  // h_kv = 0 leaves params.H_kv at its default (H).
  Problem(int64_t t, int64_t h, int64_t d, int64_t w, std::vector<int32_t> docs, uint32_t seed,
          int64_t block_size = 128, int64_t h_kv = 0)
      : T(t),
        H(h),
        H_kv(h_kv == 0 ? h : h_kv),
        D(d),
        ld((h + 2 * H_kv) * d + 3),
        doc(std::move(docs)) {
    std::mt19937 rng(seed);
    // Scores of a few units (std ~ 0.12·2²·sqrt(D)), so softmax rows are far from uniform.
    std::normal_distribution<float> qk(0.0f, 2.0f);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    qkv.resize(static_cast<size_t>(T * ld));
    for (int64_t i = 0; i < T; ++i) {
      for (int64_t c = 0; c < ld; ++c) {
        qkv[static_cast<size_t>(i * ld + c)] = c < (H + H_kv) * D ? qk(rng) : u(rng);
      }
    }
    dout.resize(static_cast<size_t>(T * H * D));
    for (auto& x : dout) x = u(rng);
    params.T = T;
    params.H = H;
    params.H_kv = h_kv;
    params.D = D;
    params.ld = ld;
    params.window_blocks = w;
    params.block_size = block_size;
    rebind();
  }
  Problem(const Problem& other) : Problem(other, false) {}
  Problem& operator=(const Problem&) = delete;
  // The same problem with q, k, v and dout rounded to bf16: the exact math on the operands the
  // bf16 kernels round, so comparing against it leaves only the kernels' own roundings.
  Problem rounded_to_bf16() const { return Problem(*this, true); }
  // Points params at this copy's buffers.
  void rebind() {
    params.q = qkv.data();
    params.k = qkv.data() + H * D;
    params.v = qkv.data() + (H + H_kv) * D;
    params.doc = doc.data();
  }
  float& k(int64_t t, int64_t h, int64_t e) {
    return qkv[static_cast<size_t>(t * ld + (H + h) * D + e)];
  }
  float& v(int64_t t, int64_t h, int64_t e) {
    return qkv[static_cast<size_t>(t * ld + (H + H_kv + h) * D + e)];
  }
  // Column of the first element of slice s (0: q, 1: k, 2: v) and its width.
  int64_t slice_begin(int s) const { return s == 0 ? 0 : H * D + (s - 1) * H_kv * D; }
  int64_t slice_width(int s) const { return s == 0 ? H * D : H_kv * D; }

 private:
  Problem(const Problem& other, bool round)
      : T(other.T),
        H(other.H),
        H_kv(other.H_kv),
        D(other.D),
        ld(other.ld),
        doc(other.doc),
        qkv(other.qkv),
        dout(other.dout),
        params(other.params) {
    if (round) {
      for (float& x : qkv) x = round_to_bf16(x);
      for (float& x : dout) x = round_to_bf16(x);
    }
    rebind();
  }
};

// The test's own statement of the mask, independent of the library's.
bool sees(const AttentionParams& p, int64_t i, int64_t j) {
  return j <= i && p.doc[i] == p.doc[j] && i / p.block_size - j / p.block_size < p.window_blocks;
}

// max |got − want| / max(|want|, 1): a norm-wise relative error, since single entries of a
// gradient can be tiny differences of large terms. The floor of 1 is the size of those terms
// (inputs are O(1)), and keeps the measure finite where the gradient is exactly zero, as dq and
// dk are for a query that sees only itself.
double rel_error(const std::vector<float>& got, const std::vector<float>& want) {
  double err = 0, scale = 1;
  for (size_t i = 0; i < got.size(); ++i) {
    if (!std::isfinite(got[i])) return std::numeric_limits<double>::infinity();
    err = std::max(err, std::abs(static_cast<double>(got[i]) - want[i]));
    scale = std::max(scale, std::abs(static_cast<double>(want[i])));
  }
  return err / scale;
}

struct Grads {
  std::vector<float> dq, dk, dv;  // [T, H·D], [T, H_kv·D], [T, H_kv·D]
};

// Runs `backward` into three separate [T, ld] buffers whose slices are NaN and the rest is
// sentinel, checks the sentinel survived, and returns the slices compacted.
template <typename Fn>
Grads run_backward(const Problem& pr, Fn backward, std::string* stray) {
  std::vector<float> buf[3];
  for (int s = 0; s < 3; ++s) {
    buf[s].assign(static_cast<size_t>(pr.T * pr.ld), kSentinel);
    for (int64_t t = 0; t < pr.T; ++t) {
      std::fill_n(buf[s].begin() + t * pr.ld + pr.slice_begin(s), pr.slice_width(s), kNaN);
    }
  }
  backward(buf[0].data(), buf[1].data() + pr.slice_begin(1), buf[2].data() + pr.slice_begin(2));
  Grads g;
  std::vector<float>* outs[3] = {&g.dq, &g.dk, &g.dv};
  for (int s = 0; s < 3; ++s) {
    const int64_t begin = pr.slice_begin(s), end = begin + pr.slice_width(s);
    for (int64_t t = 0; t < pr.T; ++t) {
      for (int64_t c = 0; c < pr.ld; ++c) {
        const float x = buf[s][static_cast<size_t>(t * pr.ld + c)];
        if (c >= begin && c < end) {
          outs[s]->push_back(x);
        } else if (std::memcmp(&x, &kSentinel, sizeof x) != 0 && stray->empty()) {
          *stray = "gradient " + std::to_string(s) + " wrote token " + std::to_string(t) +
                   " column " + std::to_string(c) + " outside its slice";
        }
      }
    }
  }
  return g;
}

struct Case {
  int64_t T, H, D, W;
  Docs docs;
};

// Every T, doc layout and window, with (H, D) cycling through all eight pairs: all values of
// every parameter appear without the full product's cost. D = 36 is a multiple of neither the
// AMX k step (32) nor any kernel's nr, so both paddings are exercised.
std::vector<Case> awkward_cases() {
  std::vector<Case> cases;
  const int64_t hs[] = {1, 3}, ds[] = {8, 16, 36, 64};
  int n = 0;
  for (int64_t T : {1, 7, 127, 128, 129, 300, 513}) {
    for (Docs docs : {Docs::kSingle, Docs::kManyShort, Docs::kTileEdge, Docs::kStartAt0And1}) {
      for (int64_t W : {1, 2, 5}) {
        cases.push_back({T, hs[n % 2], ds[n / 2 % 4], W, docs});
        ++n;
      }
    }
  }
  return cases;
}

std::string describe(const Case& c) {
  return "T=" + std::to_string(c.T) + " H=" + std::to_string(c.H) + " D=" + std::to_string(c.D) +
         " W=" + std::to_string(c.W) + " docs=" + name(c.docs);
}

TEST(Attention, ForwardMatchesReference) {
  // fp32 with an online softmax vs a double reference, relative to max(|want|, 1). out is a
  // convex combination of v (|v| ≤ 1) whose weights are fp32 sums over up to 513 keys (error
  // ~sqrt(T)·eps, worse for the running rescales) with a ~1 ulp exp; lse carries one rounded log.
  // Seen: out 2.1e-6, lse 3.4e-7. Bound: 1e-5.
  double worst_out = 0, worst_lse = 0;
  uint32_t seed = 100;
  for (const Case& c : awkward_cases()) {
    std::mt19937 rng(seed);
    Problem pr(c.T, c.H, c.D, c.W, make_docs(c.docs, c.T, rng), seed++);
    const size_t n_out = static_cast<size_t>(c.T * c.H * c.D),
                 n_lse = static_cast<size_t>(c.H * c.T);
    std::vector<float> out(n_out, kNaN), lse(n_lse, kNaN), want_out(n_out), want_lse(n_lse);
    attention_forward(pr.params, out.data(), lse.data());
    attention_forward_reference(pr.params, want_out.data(), want_lse.data());
    const double e_out = rel_error(out, want_out), e_lse = rel_error(lse, want_lse);
    EXPECT_LT(e_out, 1e-5) << describe(c);
    EXPECT_LT(e_lse, 1e-5) << describe(c);
    worst_out = std::max(worst_out, e_out);
    worst_lse = std::max(worst_lse, e_lse);
  }
  std::printf("forward worst relative error: out %.3g, lse %.3g\n", worst_out, worst_lse);
}

TEST(Attention, BackwardMatchesReference) {
  // The gradients are fp32 sums over up to T keys or queries of products that include the
  // cancellation dP − Delta; measured relative to max(max |want|, 1) per tensor.
  // Seen: dq 1.6e-6, dk 1.9e-6, dv 1.2e-6. Bound: 2e-5.
  double worst[3] = {0, 0, 0};
  uint32_t seed = 200;
  for (const Case& c : awkward_cases()) {
    std::mt19937 rng(seed);
    Problem pr(c.T, c.H, c.D, c.W, make_docs(c.docs, c.T, rng), seed++);
    std::vector<float> out(static_cast<size_t>(c.T * c.H * c.D)),
        lse(static_cast<size_t>(c.H * c.T));
    attention_forward(pr.params, out.data(), lse.data());
    std::string stray;
    Grads got = run_backward(
        pr,
        [&](float* dq, float* dk, float* dv) {
          attention_backward(pr.params, out.data(), lse.data(), pr.dout.data(), dq, dk, dv);
        },
        &stray);
    EXPECT_TRUE(stray.empty()) << stray << " " << describe(c);
    Grads want = run_backward(
        pr,
        [&](float* dq, float* dk, float* dv) {
          attention_backward_reference(pr.params, pr.dout.data(), dq, dk, dv);
        },
        &stray);
    const double e[3] = {rel_error(got.dq, want.dq), rel_error(got.dk, want.dk),
                         rel_error(got.dv, want.dv)};
    for (int s = 0; s < 3; ++s) {
      EXPECT_LT(e[s], 2e-5) << "d"
                            << "qkv"[s] << " " << describe(c);
      worst[s] = std::max(worst[s], e[s]);
    }
  }
  std::printf("backward worst relative error: dq %.3g, dk %.3g, dv %.3g\n", worst[0], worst[1],
              worst[2]);
}

// Outputs of one forward and backward; the backward starts from the forward's own out and lse,
// as in training.
struct Outputs {
  std::vector<float> out, lse;
  Grads g;
};

// The forward's bf16 copy of out (out_rounded) holds out rounded, bit for bit.
void expect_rounded_copy(const std::vector<float>& out, const std::vector<bf16>& rounded,
                         const std::string& what) {
  ASSERT_EQ(out.size(), rounded.size());
  size_t wrong = 0, first = 0;
  for (size_t i = 0; i < out.size(); ++i) {
    if (rounded[i].bits != to_bf16_bits(out[i]) && wrong++ == 0) first = i;
  }
  EXPECT_EQ(wrong, 0u) << what << ": first at " << first << " of " << out.size();
}

// The kernels on `kernel`, or through the public entry points (the active kernel of
// pr.params.precision) when it is null. Every output starts as NaN; the forward also writes
// out rounded (out_rounded), checked against out.
Outputs run_kernels(const Problem& pr, const MicroKernel* kernel, std::string* stray) {
  Outputs r;
  r.out.assign(static_cast<size_t>(pr.T * pr.H * pr.D), kNaN);
  r.lse.assign(static_cast<size_t>(pr.H * pr.T), kNaN);
  std::vector<bf16> rounded(r.out.size(), bf16{0xFFFF});  // a NaN no rounding of out gives
  if (kernel != nullptr) {
    attention_forward_with(*kernel, pr.params, r.out.data(), r.lse.data(), rounded.data());
  } else {
    attention_forward(pr.params, r.out.data(), r.lse.data(), rounded.data());
  }
  expect_rounded_copy(r.out, rounded, kernel != nullptr ? kernel->isa : "active kernel");
  r.g = run_backward(
      pr,
      [&](float* dq, float* dk, float* dv) {
        if (kernel != nullptr) {
          attention_backward_with(*kernel, pr.params, r.out.data(), r.lse.data(), pr.dout.data(),
                                  dq, dk, dv);
        } else {
          attention_backward(pr.params, r.out.data(), r.lse.data(), pr.dout.data(), dq, dk, dv);
        }
      },
      stray);
  return r;
}

Outputs run_reference(const Problem& pr) {
  Outputs r;
  r.out.assign(static_cast<size_t>(pr.T * pr.H * pr.D), kNaN);
  r.lse.assign(static_cast<size_t>(pr.H * pr.T), kNaN);
  attention_forward_reference(pr.params, r.out.data(), r.lse.data());
  std::string stray;
  r.g = run_backward(
      pr,
      [&](float* dq, float* dk, float* dv) {
        attention_backward_reference(pr.params, pr.dout.data(), dq, dk, dv);
      },
      &stray);
  return r;
}

constexpr const char* kOutputNames[5] = {"out", "lse", "dq", "dk", "dv"};

struct Errors {
  double e[5] = {0, 0, 0, 0, 0};  // in the order of kOutputNames
  void max_with(const Errors& o) {
    for (int i = 0; i < 5; ++i) e[i] = std::max(e[i], o.e[i]);
  }
  std::string str() const {
    char buf[160];
    std::snprintf(buf, sizeof buf, "out %.3g, lse %.3g, dq %.3g, dk %.3g, dv %.3g", e[0], e[1],
                  e[2], e[3], e[4]);
    return buf;
  }
};

Errors errors(const Outputs& got, const Outputs& want) {
  Errors err;
  err.e[0] = rel_error(got.out, want.out);
  err.e[1] = rel_error(got.lse, want.lse);
  err.e[2] = rel_error(got.g.dq, want.g.dq);
  err.e[3] = rel_error(got.g.dk, want.g.dk);
  err.e[4] = rel_error(got.g.dv, want.g.dv);
  return err;
}

// Bounds of the fp32 kernels, as the two tests above state them.
constexpr Errors kFp32Bounds = {{1e-5, 1e-5, 2e-5, 2e-5, 2e-5}};

// Bounds of the bf16 kernels against the reference on the same problem with q, k, v and dout
// rounded to bf16, so that only the kernels' own roundings are measured: P is rounded to bf16
// as the operand of P·V and Pᵀ·dO, dS as the operand of dSᵀ·Q and dS·K; everything else
// (scores, softmax statistics, Delta, accumulators) is fp32, as in the fp32 kernels. Errors are
// relative to max(max |want|, 1) as above; every bf16 kernel (AMX, AVX512-BF16, fp32 kernels on
// rounded operands) gives the same figures, since bf16 products are exact in fp32.
//   out: Σ_j bf16(p_j)·v_j / l with |bf16(p) − p| ≤ 2⁻⁹·p and |v| ≤ 1, so |error| ≤ 2⁻⁹ ≈
//     1.95e-3 whatever the weights; the fp32 part adds ~1e-6. Seen 1.5e-3. Bound 2e-3.
//   lse: no bf16 rounding reaches it (the scores are products of the very values the reference
//     uses, summed in fp32): the fp32 bound, 1e-5. Seen 1.5e-7.
//   dv = Σ_i bf16(P_ij)·dO_i: 2⁻⁹ relative per term, but the terms share no normalizer, so
//     the error is up to 2⁻⁹·Σ_i P_ij·|dO_i|, which exceeds 2⁻⁹·max(|dv|, 1) for keys many
//     queries attend to; the rounding errors of the up to 513 terms partly cancel. Seen 2.7e-3.
//     Bound 4e-3.
//   dq, dk: sums of bf16(dS)·k and bf16(dS)ᵀ·q, with dS = scale·P∘(dP − Delta) rounded to 2⁻⁹
//     relative, and the error of Delta = bf16(dO)·out, where out carries the forward's P
//     rounding (≤ 2⁻⁹, above). Seen 3.8e-3 (6.5e-3 and 8.7e-3 when Delta used the unrounded
//     dO, inconsistent with the dO of dP). Bound 6e-3.
constexpr Errors kBf16Bounds = {{2e-3, 1e-5, 6e-3, 6e-3, 4e-3}};
// And against the exact reference (unrounded operands), a check of scale rather than of
// rounding: rounding q and k moves a score s = scale·Σ_e q_e·k_e by ~2⁻⁹·scale·sqrt(Σ_e
// q_e²k_e²) ≈ 6e-3 (one sigma at D = 64, |q|, |k| ~ 2), up to ~2.5e-2 over the many pairs, which
// moves a softmax weight by as much relative: out (a mix of v, |v| ≤ 1) and lse by up to that.
// Seen: out 1.8e-2, lse 4.6e-3, dq 1.1e-2, dk 1.0e-2, dv 6.5e-3. Bounds 3e-2 on out, 1e-2 on
// lse, 2e-2 on the gradients.
constexpr Errors kBf16ExactBounds = {{3e-2, 1e-2, 2e-2, 2e-2, 2e-2}};

// got within the bounds, one expectation per output.
void expect_within(const Errors& got, const Errors& bound, const std::string& what) {
  for (int i = 0; i < 5; ++i) {
    EXPECT_LT(got.e[i], bound.e[i]) << kOutputNames[i] << " " << what;
  }
}

TEST(Attention, Bf16MatchesRoundedReference) {
  // The active bf16 kernel (AMX where the CPU has it) on every awkward case.
  Errors worst_rounded, worst_exact;
  uint32_t seed = 300;
  for (const Case& c : awkward_cases()) {
    std::mt19937 rng(seed);
    Problem pr(c.T, c.H, c.D, c.W, make_docs(c.docs, c.T, rng), seed++);
    pr.params.precision = Precision::kBf16;
    std::string stray;
    const Outputs got = run_kernels(pr, nullptr, &stray);
    EXPECT_TRUE(stray.empty()) << stray << " " << describe(c);
    const Errors rounded = errors(got, run_reference(pr.rounded_to_bf16()));
    const Errors exact = errors(got, run_reference(pr));
    expect_within(rounded, kBf16Bounds, "vs rounded reference, " + describe(c));
    expect_within(exact, kBf16ExactBounds, "vs exact reference, " + describe(c));
    worst_rounded.max_with(rounded);
    worst_exact.max_with(exact);
  }
  std::printf("bf16 (%s) worst relative error vs rounded reference: %s\n",
              active_bf16_microkernel().isa, worst_rounded.str().c_str());
  std::printf("bf16 (%s) worst relative error vs exact reference: %s\n",
              active_bf16_microkernel().isa, worst_exact.str().c_str());
}

TEST(Attention, EveryMicroKernelMatchesReference) {
  // Every kernel this CPU has, whatever NANOGPT_ISA selects: fp32 ones in fp32, and in bf16
  // the native ones (AVX512-BF16 8×32, AMX 32×32) and the fp32 ones on operands their packers
  // round. Their mr (4, 6, 8, 32) and nr (8, 16, 32) pad tiles and head dims differently.
  // Every third awkward case, which still covers every T, D, document layout and window, and
  // one grouped-query case.
  const std::vector<Case> all = awkward_cases();
  struct Config {
    MicroKernel kernel;
    Precision precision;
  };
  std::vector<Config> configs;
  for (const MicroKernel& k : available_microkernels()) configs.push_back({k, Precision::kFp32});
  for (const MicroKernel& k : bf16_microkernels_under_test()) {
    configs.push_back({k, Precision::kBf16});
  }
  for (const Config& config : configs) {
    const bool bf16 = config.precision == Precision::kBf16;
    const std::string who = std::string(config.kernel.isa) + (bf16 ? " bf16" : " fp32") +
                            " mr=" + std::to_string(config.kernel.mr) +
                            " nr=" + std::to_string(config.kernel.nr);
    Errors worst;
    uint32_t seed = 400;
    for (size_t i = 0; i < all.size(); i += 3) {
      const Case& c = all[i];
      std::mt19937 rng(seed);
      Problem pr(c.T, c.H, c.D, c.W, make_docs(c.docs, c.T, rng), seed++);
      pr.params.precision = config.precision;
      std::string stray;
      const Outputs got = run_kernels(pr, &config.kernel, &stray);
      EXPECT_TRUE(stray.empty()) << stray << " " << who << " " << describe(c);
      const Errors e = errors(got, run_reference(bf16 ? pr.rounded_to_bf16() : pr));
      expect_within(e, bf16 ? kBf16Bounds : kFp32Bounds, who + ", " + describe(c));
      worst.max_with(e);
    }
    // And grouped-query heads (4 over 2), whose K/V blocks each serve two query heads.
    {
      const Case c{129, 4, 36, 2, Docs::kManyShort};
      std::mt19937 rng(seed);
      Problem pr(c.T, c.H, c.D, c.W, make_docs(c.docs, c.T, rng), seed++, 128, /*h_kv=*/2);
      pr.params.precision = config.precision;
      std::string stray;
      const Outputs got = run_kernels(pr, &config.kernel, &stray);
      EXPECT_TRUE(stray.empty()) << stray << " " << who << " H_kv=2 " << describe(c);
      const Errors e = errors(got, run_reference(bf16 ? pr.rounded_to_bf16() : pr));
      expect_within(e, bf16 ? kBf16Bounds : kFp32Bounds, who + ", H_kv=2 " + describe(c));
      worst.max_with(e);
    }
    std::printf("%-24s worst relative error: %s\n", who.c_str(), worst.str().c_str());
  }
}

TEST(Attention, Bf16DeltaUsesThePackersRounding) {
  // In bf16, dP = dO·Vᵀ is computed from dO as the packers round it, which flushes fp32
  // denormals to zero; Delta = dO·O must be computed from the same bits, or each row of dS no
  // longer sums to zero. Here half the columns of dO are denormal (1.1e-38) where V (and so O)
  // is ~1e36: their products (~0.01 each, ~0.26 per row) are in a Delta from denormals rounded
  // to nearest and absent from dP, which would move every dS by scale·P·0.26 and dq, dk by
  // far more than their bounds. T = 128, one block: a query sees at most 128 keys, so o stays
  // below 128·1e36, finite.
  const int64_t T = 128, H = 2, D = 64;
  Problem pr(T, H, D, 1, std::vector<int32_t>(T, 0), 41);
  pr.params.precision = Precision::kBf16;
  std::mt19937 rng(42);
  std::uniform_real_distribution<float> big(0.5e36f, 1.0e36f);
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t h = 0; h < H; ++h) {
      for (int64_t e = 0; e < D / 2; ++e) {
        pr.v(t, h, e) = big(rng);
        pr.dout[static_cast<size_t>(t * H * D + h * D + e)] = 1.1e-38f;
      }
    }
  }
  ASSERT_EQ(std::fpclassify(pr.dout[0]), FP_SUBNORMAL);
  ASSERT_EQ(round_to_bf16(pr.dout[0]), 0.0f);
  std::string stray;
  const Outputs got = run_kernels(pr, nullptr, &stray);
  EXPECT_TRUE(stray.empty()) << stray;
  const Errors e = errors(got, run_reference(pr.rounded_to_bf16()));
  expect_within(e, kBf16Bounds, "denormal dO");
  std::printf("bf16 with denormal dO: %s\n", e.str().c_str());
}

// q, k and v given stored in bf16 alone (AttentionParams::q_bf16, fp32 q, k, v null: how bf16
// training stores them) give every output the bits that q, k, v in fp32 give with bf16
// products: the packers pack the same operands. So does the backward's dout given in bf16
// alone (dout_bf16), with Delta from the same rounded values; and out given as its rounded
// copy alone (out_bf16) gives the bits of an fp32 out holding the rounded values. The forward
// writes that copy alone (out null) with the same bits. Every bf16 kernel, every fourth awkward
// case and grouped-query heads.
TEST(Attention, Bf16StoredOperandsGiveTheBitsOfTheirFp32Originals) {
  const std::vector<Case> all = awkward_cases();
  std::vector<std::pair<Case, int64_t>> cases;  // with H_kv (0: H)
  for (size_t i = 0; i < all.size(); i += 4) cases.emplace_back(all[i], 0);
  cases.emplace_back(Case{129, 4, 36, 2, Docs::kManyShort}, 2);
  for (const MicroKernel& kernel : bf16_microkernels_under_test()) {
    uint32_t seed = 700;
    for (const auto& [c, h_kv] : cases) {
      std::mt19937 rng(seed);
      Problem pr(c.T, c.H, c.D, c.W, make_docs(c.docs, c.T, rng), seed++, 128, h_kv);
      pr.params.precision = Precision::kBf16;
      std::string stray;
      const Outputs want = run_kernels(pr, &kernel, &stray);
      std::vector<bf16> rounded(pr.qkv.size());
      for (size_t i = 0; i < rounded.size(); ++i) rounded[i] = to_bf16(pr.qkv[i]);
      Problem stored(pr);
      stored.params.q_bf16 = rounded.data();
      stored.params.k_bf16 = rounded.data() + pr.H * pr.D;
      stored.params.v_bf16 = rounded.data() + (pr.H + pr.H_kv) * pr.D;
      stored.params.q = stored.params.k = stored.params.v = nullptr;
      const Outputs got = run_kernels(stored, &kernel, &stray);
      std::vector<bf16> dout_rounded(pr.dout.size());
      for (size_t i = 0; i < pr.dout.size(); ++i) dout_rounded[i] = to_bf16(pr.dout[i]);
      const Grads from_bf16_dout = run_backward(
          stored,
          [&](float* dq, float* dk, float* dv) {
            attention_backward_with(kernel, stored.params, got.out.data(), got.lse.data(), nullptr,
                                    dq, dk, dv, dout_rounded.data());
          },
          &stray);
      // The forward's rounded copy alone, then the backward's Delta from it: against an fp32
      // out holding the rounded values.
      std::vector<float> lse_alone(got.lse.size(), kNaN);
      std::vector<bf16> out_alone(got.out.size(), bf16{0xFFFF});
      attention_forward_with(kernel, stored.params, nullptr, lse_alone.data(), out_alone.data());
      expect_rounded_copy(got.out, out_alone, std::string(kernel.isa) + " (out null)");
      std::vector<float> out_widened(got.out.size());
      widen_to_float(out_alone.data(), static_cast<int64_t>(out_alone.size()), out_widened.data());
      const Grads from_widened_out = run_backward(
          stored,
          [&](float* dq, float* dk, float* dv) {
            attention_backward_with(kernel, stored.params, out_widened.data(), got.lse.data(),
                                    nullptr, dq, dk, dv, dout_rounded.data());
          },
          &stray);
      const Grads from_bf16_out = run_backward(
          stored,
          [&](float* dq, float* dk, float* dv) {
            attention_backward_with(kernel, stored.params, nullptr, got.lse.data(), nullptr, dq, dk,
                                    dv, dout_rounded.data(), out_alone.data());
          },
          &stray);
      EXPECT_TRUE(stray.empty()) << stray << " " << kernel.isa << " " << describe(c);
      const std::string who =
          std::string(kernel.isa) + " H_kv=" + std::to_string(pr.H_kv) + " " + describe(c);
      struct Pair {
        const std::vector<float>* got;
        const std::vector<float>* want;
        std::string what;
      };
      const Pair pairs[] = {{&got.out, &want.out, "out"},
                            {&got.lse, &want.lse, "lse"},
                            {&lse_alone, &want.lse, "lse (out null)"},
                            {&got.g.dq, &want.g.dq, "dq"},
                            {&got.g.dk, &want.g.dk, "dk"},
                            {&got.g.dv, &want.g.dv, "dv"},
                            {&from_bf16_dout.dq, &want.g.dq, "dq (bf16 dout)"},
                            {&from_bf16_dout.dk, &want.g.dk, "dk (bf16 dout)"},
                            {&from_bf16_dout.dv, &want.g.dv, "dv (bf16 dout)"},
                            {&from_bf16_out.dq, &from_widened_out.dq, "dq (bf16 out)"},
                            {&from_bf16_out.dk, &from_widened_out.dk, "dk (bf16 out)"},
                            {&from_bf16_out.dv, &from_widened_out.dv, "dv (bf16 out)"}};
      for (const Pair& pair : pairs) {
        ASSERT_EQ(pair.got->size(), pair.want->size());
        EXPECT_EQ(
            std::memcmp(pair.got->data(), pair.want->data(), pair.got->size() * sizeof(float)), 0)
            << pair.what << " " << who;
      }
    }
  }
}

// dout and out each in one form only, and in bf16 only with bf16 products; the forward with
// somewhere to write: else a clear error.
TEST(Attention, Bf16DoutAndOutNeedBf16ProductsAndExcludeTheirFp32Forms) {
  Problem pr(10, 1, 8, 1, std::vector<int32_t>(10, 0), 3);
  std::vector<float> out(10 * 8), lse(10), dq(pr.qkv.size()), dk(pr.qkv.size()), dv(pr.qkv.size());
  std::vector<bf16> dout_rounded(pr.dout.size(), to_bf16(0.5f)), out_rounded(out.size());
  attention_forward(pr.params, out.data(), lse.data(), out_rounded.data());
  auto backward = [&](const float* dout, const bf16* dout_bf16, const float* o, const bf16* o16) {
    attention_backward(pr.params, o, lse.data(), dout, dq.data(), dk.data(), dv.data(), dout_bf16,
                       o16);
  };
  // fp32 products
  EXPECT_THROW(backward(nullptr, dout_rounded.data(), out.data(), nullptr), InputError);
  EXPECT_THROW(backward(pr.dout.data(), nullptr, nullptr, out_rounded.data()), InputError);
  pr.params.precision = Precision::kBf16;
  const float* dout = pr.dout.data();
  EXPECT_THROW(backward(dout, dout_rounded.data(), out.data(), nullptr), InputError);
  EXPECT_THROW(backward(nullptr, nullptr, out.data(), nullptr), InputError);
  EXPECT_THROW(backward(dout, nullptr, out.data(), out_rounded.data()), InputError);
  EXPECT_THROW(backward(dout, nullptr, nullptr, nullptr), InputError);
  EXPECT_NO_THROW(backward(nullptr, dout_rounded.data(), out.data(), nullptr));
  EXPECT_NO_THROW(backward(dout, nullptr, nullptr, out_rounded.data()));
  EXPECT_NO_THROW(backward(nullptr, dout_rounded.data(), nullptr, out_rounded.data()));
  // The forward writes out, its rounded copy, or both; not neither (one query or a tile).
  EXPECT_THROW(attention_forward(pr.params, nullptr, lse.data()), InputError);
  Problem one(1, 1, 8, 1, std::vector<int32_t>(1, 0), 4);
  EXPECT_THROW(attention_forward(one.params, nullptr, lse.data()), InputError);
  // The one-query path writes the rounded copy alone with the bits it rounds out to.
  std::vector<float> one_out(8, kNaN);
  std::vector<bf16> one_rounded(8, bf16{0xFFFF});
  attention_forward(one.params, one_out.data(), lse.data());
  attention_forward(one.params, nullptr, lse.data(), one_rounded.data());
  expect_rounded_copy(one_out, one_rounded, "one query, out null");
}

TEST(Attention, RejectsKernelThatCannotTakeThePrecision) {
  // AMX multiplies bf16 only: asked for fp32 it must refuse, not round silently.
  for (const MicroKernel& k : bf16_microkernels_under_test()) {
    if (k.pack_a[0] != nullptr) continue;
    Problem pr(10, 1, 8, 1, std::vector<int32_t>(10, 0), 3);
    std::vector<float> out(10 * 8), lse(10);
    EXPECT_THROW(attention_forward_with(k, pr.params, out.data(), lse.data()), Error) << k.isa;
  }
}

// The loss Σ G∘out in double, written from the spec without the library, for finite
// differences of the reference backward; qkv laid out as in Problem.
double double_loss(const AttentionParams& p, const std::vector<double>& qkv,
                   const std::vector<float>& g) {
  const int64_t H = p.H, H_kv = p.H_kv == 0 ? H : p.H_kv, D = p.D, hd = H * D;
  double loss = 0;
  for (int64_t h = 0; h < H; ++h) {
    const int64_t kv = h / (H / H_kv);
    for (int64_t i = 0; i < p.T; ++i) {
      std::vector<double> s(static_cast<size_t>(i + 1), -INFINITY);
      double m = -INFINITY;
      for (int64_t j = 0; j <= i; ++j) {
        if (!sees(p, i, j)) continue;
        double dot = 0;
        for (int64_t e = 0; e < D; ++e) {
          dot += qkv[static_cast<size_t>(i * p.ld + h * D + e)] *
                 qkv[static_cast<size_t>(j * p.ld + (H + kv) * D + e)];
        }
        s[static_cast<size_t>(j)] = p.scale * dot;
        m = std::max(m, s[static_cast<size_t>(j)]);
      }
      double z = 0;
      for (double x : s) z += std::exp(x - m);
      for (int64_t j = 0; j <= i; ++j) {
        const double pij = std::exp(s[static_cast<size_t>(j)] - m) / z;
        for (int64_t e = 0; e < D; ++e) {
          loss += g[static_cast<size_t>(i * hd + h * D + e)] * pij *
                  qkv[static_cast<size_t>(j * p.ld + (H + H_kv + kv) * D + e)];
        }
      }
    }
  }
  return loss;
}

TEST(AttentionReference, BackwardMatchesFiniteDifferences) {
  // Tiny blocks so the window, documents and causality all bite within 9 tokens; H = 4 query
  // heads over 4, 2 or 1 key/value heads, so dk and dv sum over groups of 1, 2 and 4.
  for (int64_t h_kv : {4, 2, 1}) {
    Problem pr(9, 4, 3, 2, {4, 4, 4, 4, 4, 4, 4, 9, 9}, 7, /*block_size=*/2, h_kv);
    pr.params.scale = 0.7f;
    std::vector<double> x(pr.qkv.begin(), pr.qkv.end());
    std::string stray;
    Grads g = run_backward(
        pr,
        [&](float* dq, float* dk, float* dv) {
          attention_backward_reference(pr.params, pr.dout.data(), dq, dk, dv);
        },
        &stray);
    ASSERT_TRUE(stray.empty()) << stray;
    // Central differences in double: truncation ~h² and rounding ~1e-16/h, both far below the
    // reference's float output rounding (~6e-8 relative). Bound: 1e-6 of the largest entry.
    const double h = 1e-5;
    const std::vector<float>* grads[3] = {&g.dq, &g.dk, &g.dv};
    for (int s = 0; s < 3; ++s) {
      const int64_t width = pr.slice_width(s);
      double err = 0, scale = 0;
      for (int64_t t = 0; t < pr.T; ++t) {
        for (int64_t c = 0; c < width; ++c) {
          const size_t idx = static_cast<size_t>(t * pr.ld + pr.slice_begin(s) + c);
          const double saved = x[idx];
          x[idx] = saved + h;
          const double up = double_loss(pr.params, x, pr.dout);
          x[idx] = saved - h;
          const double down = double_loss(pr.params, x, pr.dout);
          x[idx] = saved;
          const double fd = (up - down) / (2 * h);
          const double an = (*grads[s])[static_cast<size_t>(t * width + c)];
          err = std::max(err, std::abs(fd - an));
          scale = std::max(scale, std::abs(fd));
        }
      }
      const char name = "qkv"[s];
      EXPECT_LT(err / scale, 1e-6) << "d" << name << " H_kv=" << h_kv;
      std::printf("H_kv=%lld: finite differences vs reference d%c: %.3g relative\n",
                  static_cast<long long>(h_kv), name, err / scale);
      EXPECT_GT(scale, 1e-3) << "degenerate case: gradient " << s << " is ~0";
    }
  }
}

TEST(AttentionReference, ForwardMatchesDoubleLoss) {
  // The reference forward rounds each output once to float: Σ G∘out differs from the double
  // loss by ~T·H·D·6e-8 relative. Bound 1e-6.
  Problem pr(9, 2, 3, 2, {4, 4, 4, 4, 4, 4, 4, 9, 9}, 8, /*block_size=*/2);
  std::vector<float> out(static_cast<size_t>(pr.T * pr.H * pr.D)),
      lse(static_cast<size_t>(pr.H * pr.T));
  attention_forward_reference(pr.params, out.data(), lse.data());
  double loss = 0;
  for (size_t i = 0; i < out.size(); ++i) loss += static_cast<double>(pr.dout[i]) * out[i];
  const double want =
      double_loss(pr.params, std::vector<double>(pr.qkv.begin(), pr.qkv.end()), pr.dout);
  EXPECT_NEAR(loss, want, 1e-6 * (1 + std::abs(want)));
}

// Changing a key (and its value) that a query cannot see must leave that query's out, lse and
// dq bitwise unchanged: hidden entries are skipped or contribute exact zeros, in either
// precision.
void expect_hidden_keys_ignored(Precision precision) {
  // Two docs (a boundary mid-block), W = 2: key 10 is outside the window of queries 256..299,
  // key 200 is in another doc for queries 300.., and every key is in the future of earlier ones.
  const int64_t T = 400, H = 2, D = 16;
  std::vector<int32_t> doc(T);
  for (int64_t t = 0; t < T; ++t) doc[t] = t < 300 ? 0 : 1;
  Problem base(T, H, D, 2, doc, 31);
  base.params.precision = precision;
  auto run = [&](Problem& pr, std::vector<float>& out, std::vector<float>& lse,
                 std::vector<float>& dq) {
    out.assign(static_cast<size_t>(T * H * D), kNaN);
    lse.assign(static_cast<size_t>(H * T), kNaN);
    attention_forward(pr.params, out.data(), lse.data());
    std::string stray;
    dq = run_backward(
             pr,
             [&](float* q, float* k, float* v) {
               attention_backward(pr.params, out.data(), lse.data(), pr.dout.data(), q, k, v);
             },
             &stray)
             .dq;
  };
  std::vector<float> out0, lse0, dq0;
  run(base, out0, lse0, dq0);
  int future = 0, other_doc = 0, outside_window = 0, visible = 0;
  for (int64_t j : {10, 63, 64, 200, 299, 300, 399}) {
    Problem pr = base;
    for (int64_t h = 0; h < H; ++h) {
      for (int64_t e = 0; e < D; ++e) {
        pr.k(j, h, e) = -2 * pr.k(j, h, e) + 0.5f;
        pr.v(j, h, e) = -pr.v(j, h, e) + 0.25f;
      }
    }
    std::vector<float> out, lse, dq;
    run(pr, out, lse, dq);
    for (int64_t i = 0; i < T; ++i) {
      const size_t row = static_cast<size_t>(i * H * D), n = static_cast<size_t>(H * D);
      const bool out_same = std::memcmp(&out[row], &out0[row], n * sizeof(float)) == 0;
      const bool dq_same = std::memcmp(&dq[row], &dq0[row], n * sizeof(float)) == 0;
      bool lse_same = true;
      for (int64_t h = 0; h < H; ++h) {
        const size_t idx = static_cast<size_t>(h * T + i);
        lse_same = lse_same && std::memcmp(&lse[idx], &lse0[idx], sizeof(float)) == 0;
      }
      if (sees(pr.params, i, j)) {
        ++visible;
        EXPECT_FALSE(out_same) << "query " << i << " ignores visible key " << j;
        EXPECT_FALSE(lse_same) << "query " << i << " ignores visible key " << j;
        EXPECT_FALSE(dq_same) << "query " << i << " ignores visible key " << j;
        continue;
      }
      if (j > i) {
        ++future;
      } else if (doc[i] != doc[j]) {
        ++other_doc;
      } else {
        ++outside_window;
      }
      EXPECT_TRUE(out_same && lse_same && dq_same) << "query " << i << " sees hidden key " << j;
    }
  }
  EXPECT_GT(future, 0);
  EXPECT_GT(other_doc, 0);
  EXPECT_GT(outside_window, 0);
  EXPECT_GT(visible, 0);
}

TEST(Attention, HiddenKeysDoNotChangeOutputs) {
  expect_hidden_keys_ignored(Precision::kFp32);
}

TEST(Attention, HiddenKeysDoNotChangeOutputsBf16) {
  expect_hidden_keys_ignored(Precision::kBf16);
}

TEST(Attention, BitwiseIdenticalAcrossThreadCounts) {
  // Tasks own their outputs and sum them in a fixed order (dk, dv of a K/V head over its query
  // heads in order), so 1, 2 and 3 threads must agree to the bit, in both precisions, with and
  // without grouped-query heads, and so must the grouping of heads and dQ from kept or from
  // recomputed score gradients. D = 40 pads to the AMX k step and to nr.
  std::mt19937 rng(5);
  std::vector<int32_t> doc = make_docs(Docs::kManyShort, 700, rng);
  for (int64_t t = 300; t < 700; ++t) doc[t] = doc[299] + 1;  // one long doc too
  struct Heads {
    int64_t H, H_kv;
  };
  for (const Heads heads : {Heads{3, 3}, Heads{4, 2}, Heads{4, 1}}) {
    for (Precision precision : {Precision::kFp32, Precision::kBf16}) {
      const std::string what = std::string(precision == Precision::kBf16 ? "bf16" : "fp32") +
                               " H=" + std::to_string(heads.H) +
                               " H_kv=" + std::to_string(heads.H_kv);
      Problem pr(700, heads.H, 40, 3, doc, 77, 128, heads.H_kv);
      pr.params.precision = precision;
      auto run = [&](int threads) {
        ThreadPool pool(threads);
        ThreadPool::Use use(pool);
        std::string stray;
        Outputs r = run_kernels(pr, nullptr, &stray);
        EXPECT_TRUE(stray.empty()) << stray;
        return r;
      };
      auto same = [](const std::vector<float>& a, const std::vector<float>& b) {
        return a.size() == b.size() &&
               std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
      };
      const Outputs one = run(1);
      auto expect_same = [&](const Outputs& r, const std::string& how) {
        EXPECT_TRUE(same(one.out, r.out)) << what << " " << how;
        EXPECT_TRUE(same(one.lse, r.lse)) << what << " " << how;
        EXPECT_TRUE(same(one.g.dq, r.g.dq)) << what << " " << how;
        EXPECT_TRUE(same(one.g.dk, r.g.dk)) << what << " " << how;
        EXPECT_TRUE(same(one.g.dv, r.g.dv)) << what << " " << how;
      };
      for (int threads : {2, 3}) expect_same(run(threads), std::to_string(threads) + " threads");
      // Heads packed and processed one at a time rather than all together (the budget decides
      // for large problems): the same bits.
      const int64_t budget = set_attention_packed_budget(1);
      const Outputs per_head = run(2);
      set_attention_packed_budget(budget);
      expect_same(per_head, "one head per group, 2 threads");
      // The query-tile tasks recomputing P and dS instead of reading the key-tile tasks' dS:
      // the same bits (and the default budget must have kept them, or this compares a path
      // with itself).
      ASSERT_TRUE(attention_backward_keeps_score_gradients(pr.params));
      const int64_t stored = set_attention_stored_gradient_budget(0);
      ASSERT_FALSE(attention_backward_keeps_score_gradients(pr.params));
      const Outputs recomputed = run(2);
      // A budget of exactly one key tile's dS for one K/V head: kept, in groups of one K/V
      // head and chunks of a few key tiles, dq carried from chunk to chunk.
      const MicroKernel& kernel =
          precision == Precision::kBf16 ? active_bf16_microkernel() : active_microkernel();
      const int64_t one_tile = score_gradient_bytes_per_key_tile(kernel, pr.params);
      set_attention_stored_gradient_budget(one_tile);
      ASSERT_TRUE(attention_backward_keeps_score_gradients(pr.params));
      const Outputs chunked = run(2);
      set_attention_stored_gradient_budget(one_tile - 1);
      EXPECT_FALSE(attention_backward_keeps_score_gradients(pr.params));
      set_attention_stored_gradient_budget(stored);
      expect_same(recomputed, "score gradients recomputed, 2 threads");
      expect_same(chunked, "score gradients kept a few key tiles at a time, 2 threads");
    }
  }
}

TEST(Attention, VisitedFractionScalesWithWindow) {
  auto fraction = [](int64_t T, int64_t W, std::vector<int32_t> doc) {
    AttentionParams p;
    p.T = T;
    p.H = 6;
    p.D = 128;
    p.ld = 3 * 6 * 128;
    p.doc = doc.data();
    p.window_blocks = W;
    return attention_visited_fraction(p);
  };
  auto one_doc = [](int64_t T) { return std::vector<int32_t>(static_cast<size_t>(T), 0); };
  // W = 2 with 128-token blocks: a query sees its block and the one before, 256 keys, so about
  // 256/4096 of all pairs at any tile size that divides a block.
  const double w2 = fraction(4096, 2, one_doc(4096));
  EXPECT_GT(w2, 0.5 * 2 * 128 / 4096.0);
  EXPECT_LT(w2, 2.0 * 2 * 128 / 4096.0);
  // Cost ~ T·W: doubling T halves the fraction; doubling W about doubles it.
  EXPECT_NEAR(fraction(8192, 2, one_doc(8192)), w2 / 2, 0.01 * w2);
  const double w4 = fraction(4096, 4, one_doc(4096));
  EXPECT_GT(w4 / w2, 1.9);
  EXPECT_LT(w4 / w2, 2.2);
  // A window covering everything leaves plain causal attention: n(n+1)/2 of n² tile pairs.
  const double n = 4096.0 / static_cast<double>(kBq);
  EXPECT_NEAR(fraction(4096, 32, one_doc(4096)), (n + 1) / (2 * n), 1e-12);
  EXPECT_NEAR(fraction(4096, 1000000, one_doc(4096)), (n + 1) / (2 * n), 1e-12);
  // Short documents cut it further: one-tile docs aligned to tiles leave only the diagonal.
  std::vector<int32_t> docs(4096);
  for (int64_t t = 0; t < 4096; ++t) docs[t] = static_cast<int32_t>(t / kBq);
  EXPECT_NEAR(fraction(4096, 32, docs), 1.0 / n, 1e-12);
  // Decoding the last 64 positions of 4096 with W = 2: one query tile (block 31) sees blocks
  // 30 and 31, keys 3840..4095: 256 / kBk of the 4096 / kBk key tiles.
  std::vector<int32_t> doc = one_doc(4096);
  AttentionParams p;
  p.T = 64;
  p.T_kv = 4096;
  p.H = 6;
  p.H_kv = 2;
  p.D = 128;
  p.ld = 6 * 128;
  p.doc = doc.data();
  p.window_blocks = 2;
  EXPECT_EQ(attention_visited_fraction(p), 4.0 / 64);
}

TEST(Attention, RejectsBadParams) {
  Problem pr(10, 2, 8, 1, std::vector<int32_t>(10, 0), 3);
  std::vector<float> out(10 * 2 * 8), lse(2 * 10);
  AttentionParams p = pr.params;
  p.ld = 15;  // < H·D
  EXPECT_THROW(attention_forward(p, out.data(), lse.data()), Error);
  p = pr.params;
  p.window_blocks = 0;
  EXPECT_THROW(attention_forward(p, out.data(), lse.data()), Error);
  std::vector<int32_t> bad = {0, 0, 1, 1, 0, 2, 2, 2, 2, 2};
  p = pr.params;
  p.doc = bad.data();
  EXPECT_THROW(attention_forward(p, out.data(), lse.data()), Error);
  // Key/value heads that do not divide the query heads, or negative.
  for (int64_t h_kv : {-1, 3}) {
    p = pr.params;
    p.H_kv = h_kv;
    EXPECT_THROW(attention_forward(p, out.data(), lse.data()), InputError) << h_kv;
    EXPECT_THROW(attention_forward_reference(p, out.data(), lse.data()), InputError) << h_kv;
  }
  // Fewer key/value positions than queries, or negative.
  for (int64_t t_kv : {-1, 9}) {
    p = pr.params;
    p.T_kv = t_kv;
    EXPECT_THROW(attention_forward(p, out.data(), lse.data()), InputError) << t_kv;
  }
  // Row strides below a row of heads: q needs H·D, k and v H_kv·D.
  p = pr.params;
  p.ld_q = 15;
  EXPECT_THROW(attention_forward(p, out.data(), lse.data()), InputError);
  p = pr.params;
  p.H_kv = 1;
  p.ld_kv = 7;
  EXPECT_THROW(attention_forward(p, out.data(), lse.data()), InputError);
  p.ld_kv = 8;  // one key/value head of D = 8 fits
  EXPECT_NO_THROW(attention_forward(p, out.data(), lse.data()));
  // The backward differentiates training only: T_kv must be T. The doc has room for 12.
  std::vector<int32_t> doc12(12, 0);
  std::vector<float> qkv12(static_cast<size_t>(12 * pr.ld), 0.5f);
  std::vector<float> dq(static_cast<size_t>(10 * pr.ld)), dk(dq.size()), dv(dq.size());
  p = pr.params;
  p.T_kv = 12;
  p.doc = doc12.data();
  p.k = qkv12.data() + 16;
  p.v = qkv12.data() + 32;
  EXPECT_NO_THROW(attention_forward(p, out.data(), lse.data()));
  EXPECT_THROW(attention_backward(p, out.data(), lse.data(), pr.dout.data(), dq.data(), dk.data(),
                                  dv.data()),
               InputError);
  EXPECT_THROW(attention_backward_reference(p, pr.dout.data(), dq.data(), dk.data(), dv.data()),
               InputError);
  // q, k, v stored in bf16: all three or none, and only for bf16 products; with them given,
  // q, k, v may be null, but not with none.
  std::vector<bf16> rounded(pr.qkv.size());
  p = pr.params;
  p.precision = Precision::kBf16;
  p.q_bf16 = rounded.data();
  EXPECT_THROW(attention_forward(p, out.data(), lse.data()), InputError);
  p.k_bf16 = rounded.data() + 16;
  p.v_bf16 = rounded.data() + 32;
  p.q = p.k = p.v = nullptr;
  EXPECT_NO_THROW(attention_forward(p, out.data(), lse.data()));
  p.precision = Precision::kFp32;
  EXPECT_THROW(attention_forward(p, out.data(), lse.data()), InputError);
  p = pr.params;
  p.v = nullptr;
  EXPECT_THROW(attention_forward(p, out.data(), lse.data()), InputError);
}

TEST(Attention, GroupedQueryMatchesReference) {
  // H = 4 query heads over 4, 2 or 1 key/value heads, in fp32 against the reference and in bf16
  // against the reference on rounded operands, with the bounds of the tests above: dk and dv sum
  // over up to 4 query heads, and the bounds are relative to their largest entry, which grows
  // with the group as the errors do.
  Errors worst[2];
  uint32_t seed = 600;
  for (int64_t h_kv : {4, 2, 1}) {
    for (const Case& c :
         {Case{1, 4, 8, 1, Docs::kSingle}, Case{129, 4, 16, 1, Docs::kManyShort},
          Case{300, 4, 8, 2, Docs::kTileEdge}, Case{200, 4, 128, 5, Docs::kSingle}}) {
      for (Precision precision : {Precision::kFp32, Precision::kBf16}) {
        const bool bf16 = precision == Precision::kBf16;
        std::mt19937 rng(seed);
        Problem pr(c.T, c.H, c.D, c.W, make_docs(c.docs, c.T, rng), seed++, 128, h_kv);
        pr.params.precision = precision;
        std::string stray;
        const Outputs got = run_kernels(pr, nullptr, &stray);
        const std::string what =
            describe(c) + " H_kv=" + std::to_string(h_kv) + (bf16 ? " bf16" : " fp32");
        EXPECT_TRUE(stray.empty()) << stray << " " << what;
        const Errors e = errors(got, run_reference(bf16 ? pr.rounded_to_bf16() : pr));
        expect_within(e, bf16 ? kBf16Bounds : kFp32Bounds, what);
        worst[bf16].max_with(e);
      }
    }
  }
  std::printf("grouped-query fp32 worst relative error: %s\n", worst[0].str().c_str());
  std::printf("grouped-query bf16 worst relative error: %s\n", worst[1].str().c_str());
}

TEST(Attention, DecodingOverCacheMatchesFullForward) {
  // The last n of T_kv positions as queries (q a fresh [n, H·D] buffer, k and v in the
  // [T_kv, ld] "cache") give the bits of the last n rows of a forward over all T_kv positions:
  // a query's result depends only on the key tiles it sees, walked in the same order, not on
  // which queries share its tile (tiles a query does not see add exact zeros). On every
  // micro-kernel, both precisions; the reference too. Block size 32 so windows bite, and n
  // such that the query tiles start off the key tiles' grid.
  const int64_t T_kv = 300, H = 4, H_kv = 2, D = 16;
  struct Config {
    MicroKernel kernel;
    Precision precision;
  };
  std::vector<Config> configs;
  for (const MicroKernel& k : available_microkernels()) configs.push_back({k, Precision::kFp32});
  for (const MicroKernel& k : bf16_microkernels_under_test()) {
    configs.push_back({k, Precision::kBf16});
  }
  uint32_t seed = 700;
  for (Docs docs : {Docs::kSingle, Docs::kManyShort}) {
    std::mt19937 rng(seed);
    Problem full(T_kv, H, D, 3, make_docs(docs, T_kv, rng), seed++, /*block_size=*/32, H_kv);
    for (const Config& config : configs) {
      full.params.precision = config.precision;
      std::vector<float> out(static_cast<size_t>(T_kv * H * D)), lse(static_cast<size_t>(H * T_kv));
      attention_forward_with(config.kernel, full.params, out.data(), lse.data());
      for (int64_t n : {1, 7, 64, 100, 300}) {
        const int64_t first = T_kv - n;
        std::vector<float> q(static_cast<size_t>(n * H * D));
        for (int64_t i = 0; i < n; ++i) {
          std::memcpy(&q[static_cast<size_t>(i * H * D)],
                      &full.qkv[static_cast<size_t>((first + i) * full.ld)],
                      static_cast<size_t>(H * D) * sizeof(float));
        }
        AttentionParams p = full.params;
        p.T = n;
        p.T_kv = T_kv;
        p.q = q.data();
        p.ld = 0;
        p.ld_q = H * D;
        p.ld_kv = full.ld;
        std::vector<float> dec(static_cast<size_t>(n * H * D), kNaN),
            dec_lse(static_cast<size_t>(H * n), kNaN);
        attention_forward_with(config.kernel, p, dec.data(), dec_lse.data());
        const std::string what = std::string(config.kernel.isa) +
                                 (config.precision == Precision::kBf16 ? " bf16" : " fp32") +
                                 " docs=" + name(docs) + " n=" + std::to_string(n);
        if (n == 1) {
          // The public entry takes one query without the tile products
          // (attention_forward_one_query); its rounded copy is its out rounded too.
          std::vector<float> one(dec.size(), kNaN), one_lse(dec_lse.size(), kNaN);
          std::vector<bf16> rounded(dec.size(), bf16{0xFFFF});
          attention_forward(p, one.data(), one_lse.data(), rounded.data());
          expect_rounded_copy(one, rounded, what + " one query");
        }
        EXPECT_EQ(std::memcmp(dec.data(), &out[static_cast<size_t>(first * H * D)],
                              dec.size() * sizeof(float)),
                  0)
            << what;
        for (int64_t h = 0; h < H; ++h) {
          EXPECT_EQ(std::memcmp(&dec_lse[static_cast<size_t>(h * n)],
                                &lse[static_cast<size_t>(h * T_kv + first)],
                                static_cast<size_t>(n) * sizeof(float)),
                    0)
              << what << " head " << h;
        }
      }
    }
    // The reference computes each query alone, so the same holds for it.
    std::vector<float> out(static_cast<size_t>(T_kv * H * D)), lse(static_cast<size_t>(H * T_kv));
    attention_forward_reference(full.params, out.data(), lse.data());
    const int64_t n = 37, first = T_kv - n;
    AttentionParams p = full.params;
    p.T = n;
    p.T_kv = T_kv;
    p.q = full.qkv.data() + first * full.ld;
    std::vector<float> dec(static_cast<size_t>(n * H * D)), dec_lse(static_cast<size_t>(H * n));
    attention_forward_reference(p, dec.data(), dec_lse.data());
    EXPECT_EQ(std::memcmp(dec.data(), &out[static_cast<size_t>(first * H * D)],
                          dec.size() * sizeof(float)),
              0);
    for (int64_t h = 0; h < H; ++h) {
      EXPECT_EQ(std::memcmp(&dec_lse[static_cast<size_t>(h * n)],
                            &lse[static_cast<size_t>(h * T_kv + first)],
                            static_cast<size_t>(n) * sizeof(float)),
                0);
    }
  }
}

TEST(Attention, PackedOperandsLiveInTheCurrentWorkspace) {
  // The packed operands come from Workspace::current(): a workspace in use holds at least one
  // K/V head's packed K and V after a forward (2·T·D fp32 values), more after a backward, frees
  // them on release(), and the results do not depend on which workspace or whether its buffer
  // was reused.
  Problem pr(300, 4, 16, 2, std::vector<int32_t>(300, 0), 51, 128, 2);
  std::string stray;
  const Outputs before = run_kernels(pr, nullptr, &stray);
  Workspace ws("attention test");
  Workspace::Use use(ws);
  std::vector<float> out(static_cast<size_t>(pr.T * pr.H * pr.D)),
      lse(static_cast<size_t>(pr.H * pr.T));
  attention_forward(pr.params, out.data(), lse.data());
  const size_t forward_bytes = ws.bytes_held();
  EXPECT_GE(forward_bytes, static_cast<size_t>(2 * pr.T * pr.D) * sizeof(float));
  const Outputs in_ws = run_kernels(pr, nullptr, &stray);
  EXPECT_GT(ws.bytes_held(), forward_bytes);
  const Outputs again = run_kernels(pr, nullptr, &stray);  // reusing the buffer
  ws.release();
  EXPECT_EQ(ws.bytes_held(), 0u);
  for (const Outputs* r : {&in_ws, &again}) {
    EXPECT_EQ(std::memcmp(r->out.data(), before.out.data(), before.out.size() * sizeof(float)), 0);
    EXPECT_EQ(std::memcmp(r->g.dq.data(), before.g.dq.data(), before.g.dq.size() * sizeof(float)),
              0);
    EXPECT_EQ(std::memcmp(r->g.dk.data(), before.g.dk.data(), before.g.dk.size() * sizeof(float)),
              0);
  }
  EXPECT_TRUE(stray.empty()) << stray;
}

TEST(Attention, KeptScoreGradientsStayWithinTheirBudget) {
  // The backward keeps dS in the packed operands' slot: with room for all of it, exactly one
  // 64 × 64 block per query head and tile pair of each query tile's key range (one group of one
  // K/V head at a time); with room for one key tile's blocks, at most that much, however the
  // packing budget would group the heads; dq the same throughout.
  Problem pr(300, 4, 16, 2, std::vector<int32_t>(300, 0), 53, 128, 2);
  std::string stray;
  const Outputs fwd = run_kernels(pr, nullptr, &stray);
  const MicroKernel& kernel = active_microkernel();
  const int64_t one_tile = score_gradient_bytes_per_key_tile(kernel, pr.params);
  ASSERT_GT(one_tile, 0);
  const TileGemm g(kernel, Precision::kFp32, kBk, pr.D);
  const AttentionMask mask(pr.params);
  int64_t pairs = 0;
  for (int64_t q0 = 0; q0 < pr.T; q0 += kBq) {
    const auto [lo, hi] = mask.key_tiles(q0, std::min(kBq, pr.T - q0));
    pairs += hi - lo + 1;
  }
  const int64_t per_group = pr.H / 2;
  const int64_t all_of_one_kv_head = per_group * pairs * g.bytes(Block::kRowsByTile);
  ASSERT_GT(all_of_one_kv_head, one_tile);
  auto held_by_backward = [&](int64_t packed_budget, int64_t stored_budget) {
    const int64_t packed = set_attention_packed_budget(packed_budget);
    const int64_t stored = set_attention_stored_gradient_budget(stored_budget);
    Workspace ws("attention budget test");
    {
      Workspace::Use use(ws);
      const Grads got = run_backward(
          pr,
          [&](float* dq, float* dk, float* dv) {
            attention_backward(pr.params, fwd.out.data(), fwd.lse.data(), pr.dout.data(), dq, dk,
                               dv);
          },
          &stray);
      EXPECT_EQ(std::memcmp(got.dq.data(), fwd.g.dq.data(), got.dq.size() * sizeof(float)), 0);
      EXPECT_EQ(std::memcmp(got.dk.data(), fwd.g.dk.data(), got.dk.size() * sizeof(float)), 0);
    }
    set_attention_packed_budget(packed);
    set_attention_stored_gradient_budget(stored);
    return static_cast<int64_t>(ws.bytes_held());
  };
  const int64_t none_kept = held_by_backward(1, 0);
  EXPECT_EQ(held_by_backward(1, int64_t{1} << 40), none_kept + all_of_one_kv_head);
  const int64_t one_tile_kept = held_by_backward(1, one_tile);
  EXPECT_GT(one_tile_kept, none_kept);
  EXPECT_LE(one_tile_kept, none_kept + one_tile);
  EXPECT_EQ(held_by_backward(int64_t{1} << 40, one_tile), one_tile_kept);
  EXPECT_TRUE(stray.empty()) << stray;
}

TEST(Attention, DecodingPacksOnlyTheKeysItSees) {
  // One new token over a cache of 4096 with a window of one 128-token block: it sees keys
  // 3968..4095, one or two key tiles (kBk), so the tile path packs that many tiles of K and V per
  // K/V head, not the whole cache's. (A single query takes the one-query path, which packs
  // nothing; the tile path still decodes chunks of several tokens the same way.)
  const int64_t T_kv = 4096, H = 2, H_kv = 1, D = 16;
  Problem full(T_kv, H, D, 1, std::vector<int32_t>(T_kv, 0), 61, 128, H_kv);
  AttentionParams p = full.params;
  p.T = 1;
  p.T_kv = T_kv;
  p.q = full.qkv.data() + (T_kv - 1) * full.ld;
  std::vector<float> out(static_cast<size_t>(H * D)), lse(static_cast<size_t>(H));
  std::vector<float> want(out.size()), want_lse(lse.size());
  Workspace ws("decode test");
  {
    Workspace::Use use(ws);
    attention_forward_with(active_microkernel(), p, out.data(), lse.data());
  }
  // The same call over a cache of only the 128 keys it sees (as many tiles) holds as much: the
  // workspace holds the packed tiles and the per-worker tile buffers, which do not grow with
  // the cache. Packing the whole cache would hold all its tiles of K and V.
  AttentionParams seen = p;
  seen.T_kv = 128;
  seen.k = p.k + (T_kv - 128) * full.ld;
  seen.v = p.v + (T_kv - 128) * full.ld;
  seen.doc = p.doc + (T_kv - 128);
  std::vector<float> seen_out(out.size()), seen_lse(lse.size());
  Workspace ws_seen("decode test, visible keys only");
  {
    Workspace::Use use(ws_seen);
    attention_forward_with(active_microkernel(), seen, seen_out.data(), seen_lse.data());
  }
  const size_t whole_cache = static_cast<size_t>(2 * T_kv * D * H_kv) * sizeof(float);
  EXPECT_GT(ws.bytes_held(), 0u);
  EXPECT_EQ(ws.bytes_held(), ws_seen.bytes_held());
  EXPECT_LT(ws.bytes_held(), whole_cache);
  attention_forward_reference(p, want.data(), want_lse.data());
  EXPECT_LT(rel_error(out, want), kFp32Bounds.e[0]);
  EXPECT_LT(rel_error(lse, want_lse), kFp32Bounds.e[1]);
}

// A single query (decoding one token) takes attention_decode.cpp's path: the tile path's
// arithmetic without packing, so within fp32 rounding of it (only the order of each dot
// product's fp32 sum differs, so both sit within the fp32 bound of the exact result: seen
// 1.8e-6 apart; in bf16 a probability whose fp32 value moved by that rounding may round to the
// neighbouring bf16 value, 2⁻⁸ of one term at most), and within the kernels' bounds of the
// reference (exact in fp32, on bf16-rounded operands in bf16). Over caches of
// 1 to 300 positions, one and many documents, windows that bite (block size 32), grouped
// query heads and head dims that are and are not multiples of 16.
TEST(Attention, OneQueryPathMatchesTheTilePathAndTheReference) {
  struct Heads {
    int64_t H, H_kv, D;
  };
  double worst_tile[2] = {0, 0}, worst_ref[2] = {0, 0};
  uint32_t seed = 900;
  for (Docs docs : {Docs::kSingle, Docs::kManyShort}) {
    for (const Heads hd : {Heads{4, 2, 16}, Heads{3, 3, 36}, Heads{2, 1, 128}}) {
      for (int64_t W : {1, 3}) {
        std::mt19937 rng(seed);
        const int64_t T_full = 300;
        Problem full(T_full, hd.H, hd.D, W, make_docs(docs, T_full, rng), seed++, 32, hd.H_kv);
        for (int64_t T_kv : {1, 5, 64, 65, 300}) {
          for (Precision precision : {Precision::kFp32, Precision::kBf16}) {
            const bool bf16 = precision == Precision::kBf16;
            const Problem& operands = full;
            AttentionParams p = operands.params;
            p.precision = precision;
            p.T = 1;
            p.T_kv = T_kv;
            p.doc = full.doc.data();
            p.q = operands.qkv.data() + (T_kv - 1) * operands.ld;
            const size_t n = static_cast<size_t>(hd.H * hd.D);
            std::vector<float> one(n, kNaN), one_lse(static_cast<size_t>(hd.H), kNaN);
            std::vector<float> tile(n), tile_lse(one_lse.size()), ref(n), ref_lse(one_lse.size());
            attention_forward(p, one.data(), one_lse.data());
            attention_forward_with(bf16 ? active_bf16_microkernel() : active_microkernel(), p,
                                   tile.data(), tile_lse.data());
            // The reference on the operands the kernels multiply: rounded to bf16 in bf16.
            const Problem rounded = full.rounded_to_bf16();
            AttentionParams r = p;
            if (bf16) {
              r.q = rounded.qkv.data() + (T_kv - 1) * rounded.ld;
              r.k = rounded.params.k;
              r.v = rounded.params.v;
            }
            attention_forward_reference(r, ref.data(), ref_lse.data());
            const std::string what = std::string(bf16 ? "bf16" : "fp32") + " docs=" + name(docs) +
                                     " H=" + std::to_string(hd.H) +
                                     " H_kv=" + std::to_string(hd.H_kv) +
                                     " D=" + std::to_string(hd.D) + " W=" + std::to_string(W) +
                                     " T_kv=" + std::to_string(T_kv);
            const double e_tile = rel_error(one, tile), e_ref = rel_error(one, ref);
            worst_tile[bf16] = std::max(worst_tile[bf16], e_tile);
            worst_ref[bf16] = std::max(worst_ref[bf16], e_ref);
            EXPECT_LT(e_tile, bf16 ? 4e-3 : kFp32Bounds.e[0]) << what;
            EXPECT_LT(rel_error(one_lse, tile_lse), 1e-6) << what;
            EXPECT_LT(e_ref, bf16 ? kBf16Bounds.e[0] : kFp32Bounds.e[0]) << what;
            EXPECT_LT(rel_error(one_lse, ref_lse), kFp32Bounds.e[1]) << what;
          }
        }
      }
    }
  }
  std::printf("one query vs tile path: fp32 %.2g, bf16 %.2g; vs reference: fp32 %.2g, bf16 %.2g\n",
              worst_tile[0], worst_tile[1], worst_ref[0], worst_ref[1]);
}

TEST(Attention, SpeedrunShapeTiming) {
  // The speedrun's shape, D = 128: prints forward and backward time on the global pool in both
  // precisions, and checks a few query rows against the reference on a prefix (outputs of early
  // tokens do not depend on later ones); bf16 against the reference on rounded operands.
  const int64_t T = 1024, H = 6, D = 128;
  for (Precision precision : {Precision::kFp32, Precision::kBf16}) {
    const bool bf16 = precision == Precision::kBf16;
    Problem pr(T, H, D, 8, std::vector<int32_t>(T, 0), 11);
    pr.params.precision = precision;
    std::vector<float> out(static_cast<size_t>(T * H * D)), lse(static_cast<size_t>(H * T));
    std::vector<float> dq(static_cast<size_t>(T * pr.ld)), dk(dq.size()), dv(dq.size());
    using Clock = std::chrono::steady_clock;
    double best_f = 1e30, best_b = 1e30;
    for (int rep = 0; rep < 3; ++rep) {
      const auto t0 = Clock::now();
      attention_forward(pr.params, out.data(), lse.data());
      const auto t1 = Clock::now();
      attention_backward(pr.params, out.data(), lse.data(), pr.dout.data(), dq.data(),
                         dk.data() + H * D, dv.data() + 2 * H * D);
      const auto t2 = Clock::now();
      best_f = std::min(best_f, std::chrono::duration<double>(t1 - t0).count());
      best_b = std::min(best_b, std::chrono::duration<double>(t2 - t1).count());
    }
    std::printf(
        "T=%lld H=%lld D=%lld W=8 one doc, %s, %d threads: forward %.1f ms, backward %.1f ms\n",
        static_cast<long long>(T), static_cast<long long>(H), static_cast<long long>(D),
        bf16 ? "bf16" : "fp32", ThreadPool::current().size(), best_f * 1e3, best_b * 1e3);
    const Problem ref = bf16 ? pr.rounded_to_bf16() : pr;
    AttentionParams prefix = ref.params;
    prefix.T = 200;
    std::vector<float> want(static_cast<size_t>(200 * H * D)),
        want_lse(static_cast<size_t>(H * 200));
    attention_forward_reference(prefix, want.data(), want_lse.data());
    std::vector<float> got(out.begin(), out.begin() + 200 * H * D);
    EXPECT_LT(rel_error(got, want), bf16 ? kBf16Bounds.e[0] : kFp32Bounds.e[0]);
  }
}

}  // namespace
}  // namespace nanogpt
