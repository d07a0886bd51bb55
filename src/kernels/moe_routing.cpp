#include "kernels/moe_routing.hpp"

#include <algorithm>
#include <string>

#include "runtime/error.hpp"
#include "runtime/integer_math.hpp"
#include "runtime/thread_pool.hpp"

namespace nanogpt {

namespace {

// Rows per task: each output row is written by exactly one task, so the split changes nothing
// but the speed.
constexpr int64_t kRowsPerTask = 64;

template <class Fn>
void for_row_blocks(int64_t rows, const Fn& fn) {
  ThreadPool::current().parallel_for(
      static_cast<size_t>(ceil_div(rows, kRowsPerTask)), [&](size_t task, int) {
        const int64_t first = static_cast<int64_t>(task) * kRowsPerTask;
        fn(first, std::min(first + kRowsPerTask, rows));
      });
}

void check_width(const char* entry, int64_t d, int64_t ld, const char* ld_name) {
  if (d < 0 || ld < d) {
    throw InputError(std::string(entry) + ": width d = " + std::to_string(d) + " with " + ld_name +
                     " = " + std::to_string(ld) + ": d must be >= 0 and " + ld_name + " >= d");
  }
}

}  // namespace

MoePlan plan_moe_routing(int64_t tokens, int64_t experts, int64_t top_k,
                         const int32_t* expert_ids) {
  const std::string where = "MoE routing: ";
  if (tokens < 0) {
    throw InputError(where + "tokens = " + std::to_string(tokens) + " is negative");
  }
  if (experts < 1 || top_k < 1 || top_k > experts) {
    throw InputError(where + "experts = " + std::to_string(experts) +
                     ", experts per token = " + std::to_string(top_k) +
                     ": need at least one expert and 1 <= experts per token <= experts");
  }
  MoePlan plan;
  plan.tokens = tokens;
  plan.experts = experts;
  plan.top_k = top_k;
  const int64_t entries = tokens * top_k;
  // Counting sort: counts, their prefix sums, then each entry to the next free row of its
  // expert, entries in order (stable).
  plan.offsets.assign(static_cast<size_t>(experts + 1), 0);
  for (int64_t i = 0; i < entries; ++i) {
    const int32_t e = expert_ids[i];
    if (e < 0 || e >= experts) {
      throw InputError(where + "token " + std::to_string(i / top_k) + ", choice " +
                       std::to_string(i % top_k) + " names expert " + std::to_string(e) +
                       ", outside [0, " + std::to_string(experts) +
                       "): the router must pick among the layer's experts");
    }
    ++plan.offsets[static_cast<size_t>(e) + 1];
  }
  for (int64_t e = 0; e < experts; ++e) plan.offsets[e + 1] += plan.offsets[e];
  std::vector<int64_t> next(plan.offsets.begin(), plan.offsets.end() - 1);
  plan.entry_of_row.resize(static_cast<size_t>(entries));
  plan.row_of_entry.resize(static_cast<size_t>(entries));
  for (int64_t i = 0; i < entries; ++i) {
    const int64_t row = next[static_cast<size_t>(expert_ids[i])]++;
    plan.entry_of_row[row] = i;
    plan.row_of_entry[i] = row;
  }
  return plan;
}

void moe_gather(const MoePlan& plan, int64_t d, const float* X, int64_t ldx, float* Xe) {
  check_width("moe_gather", d, ldx, "ldx");
  const int64_t k = plan.top_k;
  for_row_blocks(plan.rows(), [&](int64_t first, int64_t end) {
    for (int64_t r = first; r < end; ++r) {
      const float* src = X + plan.entry_of_row[r] / k * ldx;
      std::copy(src, src + d, Xe + r * d);
    }
  });
}

void moe_gather_backward(const MoePlan& plan, int64_t d, const float* dXe, float* dX, int64_t ldx,
                         bool accumulate) {
  check_width("moe_gather_backward", d, ldx, "ldx");
  const int64_t k = plan.top_k;
  for_row_blocks(plan.tokens, [&](int64_t first, int64_t end) {
    for (int64_t t = first; t < end; ++t) {
      float* out = dX + t * ldx;
      for (int64_t s = 0; s < k; ++s) {
        const float* src = dXe + plan.row_of_entry[t * k + s] * d;
        if (s == 0 && !accumulate) {
          std::copy(src, src + d, out);
        } else {
          for (int64_t j = 0; j < d; ++j) out[j] += src[j];
        }
      }
    }
  });
}

void moe_combine(const MoePlan& plan, int64_t d, const float* Ye, const float* weights, float* Y,
                 int64_t ldy, bool accumulate) {
  check_width("moe_combine", d, ldy, "ldy");
  const int64_t k = plan.top_k;
  for_row_blocks(plan.tokens, [&](int64_t first, int64_t end) {
    for (int64_t t = first; t < end; ++t) {
      float* out = Y + t * ldy;
      for (int64_t s = 0; s < k; ++s) {
        const float w = weights[t * k + s];
        const float* src = Ye + plan.row_of_entry[t * k + s] * d;
        if (s == 0 && !accumulate) {
          for (int64_t j = 0; j < d; ++j) out[j] = w * src[j];
        } else {
          for (int64_t j = 0; j < d; ++j) out[j] += w * src[j];
        }
      }
    }
  });
}

void moe_combine_backward(const MoePlan& plan, int64_t d, const float* dY, int64_t ldy,
                          const float* Ye, const float* weights, float* dYe, float* dweights) {
  check_width("moe_combine_backward", d, ldy, "ldy");
  const int64_t k = plan.top_k;
  for_row_blocks(plan.tokens, [&](int64_t first, int64_t end) {
    for (int64_t t = first; t < end; ++t) {
      const float* g = dY + t * ldy;
      for (int64_t s = 0; s < k; ++s) {
        const int64_t row = plan.row_of_entry[t * k + s];
        const float w = weights[t * k + s];
        const float* y = Ye + row * d;
        float* out = dYe + row * d;
        double dot = 0;
        for (int64_t j = 0; j < d; ++j) {
          out[j] = w * g[j];
          dot += static_cast<double>(g[j]) * y[j];
        }
        dweights[t * k + s] = static_cast<float>(dot);
      }
    }
  });
}

}  // namespace nanogpt
