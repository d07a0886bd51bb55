// Aggregates over repeated samples of one case (issue 17, item 2): pass@k by the unbiased
// estimator of Chen et al. 2021 (Codex), and mean@n.
#pragma once

#include <cstdint>
#include <span>

namespace nanogpt {

// The probability that at least one of k samples drawn without replacement from n, of which c
// passed, passes: 1 - C(n-c, k) / C(n, k), computed as 1 - prod_{i=n-c+1}^{n} (1 - k/i) so no
// binomial coefficient is formed (they overflow doubles near n = 1030). Exactly 1 when
// n - c < k. Needs 0 <= c <= n and 1 <= k <= n (an InputError otherwise).
double pass_at_k(int64_t n, int64_t c, int64_t k);

// The mean of n per-sample scores (an InputError when there are none).
double mean_at_n(std::span<const double> scores);

}  // namespace nanogpt
