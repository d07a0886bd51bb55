#include "eval/pass_at_k.hpp"

#include <string>

#include "runtime/error.hpp"

namespace nanogpt {

double pass_at_k(int64_t n, int64_t c, int64_t k) {
  if (n < 1 || c < 0 || c > n || k < 1 || k > n) {
    throw InputError("pass@k needs 0 <= c <= n and 1 <= k <= n; got n = " + std::to_string(n) +
                     ", c = " + std::to_string(c) + ", k = " + std::to_string(k) +
                     " (ask for k no larger than the samples per case)");
  }
  if (n - c < k) return 1.0;
  double all_fail = 1.0;
  for (int64_t i = n - c + 1; i <= n; ++i) {
    all_fail *= 1.0 - static_cast<double>(k) / static_cast<double>(i);
  }
  return 1.0 - all_fail;
}

double mean_at_n(std::span<const double> scores) {
  if (scores.empty()) throw InputError("mean@n needs at least one sample");
  double sum = 0;
  for (double s : scores) sum += s;
  return sum / static_cast<double>(scores.size());
}

}  // namespace nanogpt
