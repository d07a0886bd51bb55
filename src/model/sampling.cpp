#include "model/sampling.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "kernels/fused_linear_cross_entropy.hpp"

namespace nanogpt {

int32_t sample_token(std::span<const float> logits, int64_t vocab_size,
                     const SamplingSettings& settings, Rng& rng, std::vector<int32_t>& order,
                     std::vector<double>& probs) {
  const float* z = logits.data();
  if (settings.temperature <= 0) {
    // Greedy: the most likely token, the lowest id of equal ones — what the sort below puts
    // first, found in one pass.
    int32_t best = 0;
    for (int32_t v = 1; v < static_cast<int32_t>(vocab_size); ++v) {
      if (z[v] > z[best]) best = v;
    }
    return best;
  }
  order.resize(static_cast<size_t>(vocab_size));
  probs.resize(static_cast<size_t>(vocab_size));
  const int64_t k = settings.top_k > 0 ? std::min<int64_t>(settings.top_k, vocab_size) : vocab_size;
  // Tokens by decreasing logit, equal ones by increasing id: a total order, so the permutation
  // is unique whatever sorts it. The keys are the logits' bits made order-preserving and
  // inverted (-0 counts as +0, as == does). Top-k: a partial sort of 64-bit (key, id) pairs;
  // the whole vocabulary: a stable radix sort of the keys over ids in increasing order, three
  // passes of 11 bits — an indirect comparison sort over the vocabulary was more than half of
  // sampled generation's time, and a comparison sort of the pairs still a fifth.
  thread_local std::vector<uint32_t> keys, keys_tmp;
  thread_local std::vector<int32_t> ids_tmp;
  keys.resize(static_cast<size_t>(vocab_size));
  for (int64_t v = 0; v < vocab_size; ++v) {
    uint32_t bits;
    const float f = z[v] + 0.0f;
    std::memcpy(&bits, &f, sizeof bits);
    const uint32_t ascending = (bits & 0x80000000u) != 0 ? ~bits : bits | 0x80000000u;
    keys[static_cast<size_t>(v)] = ~ascending;
  }
  if (k < vocab_size) {
    thread_local std::vector<uint64_t> pairs;
    pairs.resize(static_cast<size_t>(vocab_size));
    for (int64_t v = 0; v < vocab_size; ++v) {
      pairs[static_cast<size_t>(v)] =
          (static_cast<uint64_t>(keys[static_cast<size_t>(v)]) << 32) | static_cast<uint32_t>(v);
    }
    std::partial_sort(pairs.begin(), pairs.begin() + k, pairs.end());
    for (int64_t i = 0; i < k; ++i) {
      order[static_cast<size_t>(i)] =
          static_cast<int32_t>(pairs[static_cast<size_t>(i)] & 0xffffffffu);
    }
  } else {
    keys_tmp.resize(keys.size());
    ids_tmp.resize(keys.size());
    for (int64_t v = 0; v < vocab_size; ++v)
      order[static_cast<size_t>(v)] = static_cast<int32_t>(v);
    constexpr int kBits = 11;
    constexpr uint32_t kMask = (1u << kBits) - 1;
    std::vector<uint32_t> count(static_cast<size_t>(kMask) + 2);
    for (int shift = 0; shift < 32; shift += kBits) {
      std::fill(count.begin(), count.end(), 0u);
      for (uint32_t key : keys) ++count[((key >> shift) & kMask) + 1];
      for (size_t b = 1; b < count.size(); ++b) count[b] += count[b - 1];
      for (size_t i = 0; i < keys.size(); ++i) {
        const uint32_t at = count[(keys[i] >> shift) & kMask]++;
        keys_tmp[at] = keys[i];
        ids_tmp[at] = order[i];
      }
      keys.swap(keys_tmp);
      order.swap(ids_tmp);
    }
  }
  int32_t next = order[0];
  if (settings.temperature > 0) {
    const double mx = z[order[0]];
    double sum = 0;
    for (int64_t i = 0; i < k; ++i) {
      probs[static_cast<size_t>(i)] = std::exp((z[order[i]] - mx) / settings.temperature);
      sum += probs[static_cast<size_t>(i)];
    }
    double u = rng.uniform() * sum;
    for (int64_t i = 0; i < k; ++i) {
      u -= probs[static_cast<size_t>(i)];
      if (u <= 0 || i == k - 1) {
        next = order[static_cast<size_t>(i)];
        break;
      }
    }
  }
  return next;
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
