#include "kernels/attention_work.hpp"

#include <algorithm>
#include <atomic>

#include "kernels/attention_internal.hpp"
#include "runtime/aligned_memory.hpp"
#include "runtime/integer_math.hpp"
#include "runtime/workspace.hpp"

namespace nanogpt {

namespace {

std::atomic<int64_t> packed_budget{int64_t{2} << 20};
std::atomic<int64_t> stored_gradient_budget{int64_t{64} << 20};

}  // namespace

int64_t heads_per_group(int64_t bytes_per_head, int64_t H) {
  return std::clamp<int64_t>(packed_budget.load(std::memory_order_relaxed) / bytes_per_head, 1, H);
}

int64_t set_attention_packed_budget(int64_t bytes) {
  return packed_budget.exchange(bytes);
}

int64_t set_attention_stored_gradient_budget(int64_t bytes) {
  return stored_gradient_budget.exchange(bytes);
}

int64_t stored_score_gradient_budget() {
  return stored_gradient_budget.load(std::memory_order_relaxed);
}

std::byte* packing_workspace(int64_t bytes) {
  return Workspace::current().get("attention.packed", static_cast<size_t>(bytes));
}

TileScratch::TileScratch(std::initializer_list<int64_t> bytes, int workers) {
  int64_t total = 0;
  for (int64_t b : bytes) {
    offsets_.push_back(total);
    total += round_up(b, static_cast<int64_t>(kCacheLine));
  }
  lanes_ = Workspace::current().lanes("attention.tiles", workers, static_cast<size_t>(total),
                                      /*zero_new=*/true);
}

void sort_tasks(std::vector<Task>& tasks) {
  std::stable_sort(tasks.begin(), tasks.end(), [](const Task& a, const Task& b) {
    return a.kv != b.kv ? a.kv < b.kv : a.cost > b.cost;
  });
}

}  // namespace nanogpt
