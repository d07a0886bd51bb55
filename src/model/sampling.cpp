#include "model/sampling.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "kernels/exp_approx.hpp"
#include "kernels/fused_linear_cross_entropy.hpp"
#include "kernels/target.hpp"

namespace nanogpt {

namespace {

// The weights exp((z_v − max)/T) of the whole vocabulary into w, in fp32 (exp_approx, the one
// exp of the kernels), and their sum in double over 8 lanes in a fixed order: two plain loops,
// each of which vectorizes.
NANOGPT_TARGET_CLONES double vocabulary_weights(const float* z, int64_t n, float max, float inv_t,
                                                float* w) {
  for (int64_t v = 0; v < n; ++v) w[v] = exp_approx((z[v] - max) * inv_t);
  double lane[8] = {};
  int64_t v = 0;
  for (; v + 8 <= n; v += 8) {
    for (int l = 0; l < 8; ++l) lane[l] += static_cast<double>(w[v + l]);
  }
  for (int l = 0; v + l < n; ++l) lane[l] += static_cast<double>(w[v + l]);
  double sum = 0;
  for (double x : lane) sum += x;
  return sum;
}

}  // namespace

int32_t sample_token(std::span<const float> logits, int64_t vocab_size,
                     const SamplingSettings& settings, Rng& rng, SamplingScratch& scratch) {
  const float* z = logits.data();
  if (settings.temperature <= 0) {
    // Greedy: the most likely token, the lowest id of equal ones, in one pass.
    int32_t best = 0;
    for (int32_t v = 1; v < static_cast<int32_t>(vocab_size); ++v) {
      if (z[v] > z[best]) best = v;
    }
    return best;
  }
  if (settings.top_k <= 0 || settings.top_k >= vocab_size) {
    // The whole vocabulary: the inverse of the cumulative distribution over the ids in
    // increasing order, so no sort — a sort of the vocabulary (by an indirect comparison sort,
    // then a radix sort of the logits' bits) was most of a batched rollout's sampling time.
    float mx = z[0];
    for (int64_t v = 1; v < vocab_size; ++v) mx = z[v] > mx ? z[v] : mx;
    const auto inv_t = static_cast<float>(1.0 / settings.temperature);
    std::vector<float>& weights = scratch.weights;
    weights.resize(static_cast<size_t>(vocab_size));
    const double total = vocabulary_weights(z, vocab_size, mx, inv_t, weights.data());
    const double u = rng.uniform() * total;
    double cumulative = 0;
    int32_t last = 0;  // the last token of weight > 0: where rounding of the sums may leave u
    for (int64_t v = 0; v < vocab_size; ++v) {
      const auto w = static_cast<double>(weights[static_cast<size_t>(v)]);
      if (w == 0) continue;  // never drawn (its weight underflowed, below e^-87 of the top)
      cumulative += w;
      last = static_cast<int32_t>(v);
      if (cumulative > u) return last;
    }
    return last;
  }
  // Top-k: the k most likely tokens by a partial sort of (logit, id) keys — decreasing logit,
  // equal ones by increasing id, a total order so the permutation is unique whatever sorts it:
  // the logits' bits made order-preserving and inverted (-0 counts as +0, as == does) — then the
  // inverse of the cumulative distribution over them in that order.
  const int64_t k = settings.top_k;
  std::vector<double>& weights = scratch.top_weights;
  weights.resize(static_cast<size_t>(k));
  std::vector<uint64_t>& keys = scratch.keys;
  keys.resize(static_cast<size_t>(vocab_size));
  for (int64_t v = 0; v < vocab_size; ++v) {
    uint32_t bits;
    const float f = z[v] + 0.0f;
    std::memcpy(&bits, &f, sizeof bits);
    const uint32_t ascending = (bits & 0x80000000u) != 0 ? ~bits : bits | 0x80000000u;
    keys[static_cast<size_t>(v)] =
        (static_cast<uint64_t>(~ascending) << 32) | static_cast<uint32_t>(v);
  }
  std::partial_sort(keys.begin(), keys.begin() + k, keys.end());
  auto id = [&](int64_t i) {
    return static_cast<int32_t>(keys[static_cast<size_t>(i)] & 0xffffffffu);
  };
  const double mx = z[id(0)];
  double sum = 0;
  for (int64_t i = 0; i < k; ++i) {
    weights[static_cast<size_t>(i)] = std::exp((z[id(i)] - mx) / settings.temperature);
    sum += weights[static_cast<size_t>(i)];
  }
  double u = rng.uniform() * sum;
  for (int64_t i = 0; i < k; ++i) {
    u -= weights[static_cast<size_t>(i)];
    if (u <= 0 || i == k - 1) return id(i);
  }
  return id(0);
}

void forward_row_logits(Gpt& model, int64_t row, std::vector<float>& out) {
  forward_rows_logits(model, row, 1, out);
}

void forward_rows_logits(Gpt& model, int64_t row0, int64_t rows, std::vector<float>& out) {
  const Config& c = model.config();
  const int64_t d = c.model_dim;
  out.resize(static_cast<size_t>(rows * c.vocab_padded()));
  FusedLossParams p;
  p.T = rows;
  p.d = d;
  p.V = c.vocab_padded();
  p.x = model.final_norm().data() + row0 * d;
  p.W = model.weights().lm_head;
  p.W_packed = model.packed_head();
  p.softcap = static_cast<float>(c.logit_softcap);
  p.softcap_divisor = static_cast<float>(7.5 * std::sqrt(static_cast<double>(d)));
  p.fp8 = c.fp8_head;
  p.precision = model.precision();
  const Workspace::Use scratch(model.workspace());
  capped_logits(p, out.data());
}

}  // namespace nanogpt
