#include "posttrain/row_packing.hpp"

#include <algorithm>
#include <map>
#include <numeric>

#include "runtime/error.hpp"

namespace nanogpt {

std::span<const int32_t> PackedRows::row_inputs(int64_t r) const {
  return {ids.data() + r * (row_tokens + 1), static_cast<size_t>(row_tokens)};
}

std::span<const int32_t> PackedRows::row_targets(int64_t r) const {
  return {ids.data() + r * (row_tokens + 1) + 1, static_cast<size_t>(row_tokens)};
}

std::span<const uint8_t> PackedRows::row_weights(int64_t r) const {
  return {targets.data() + r * row_tokens, static_cast<size_t>(row_tokens)};
}

PackedRows pack_rows(std::span<const PackItem> items, int64_t row_tokens, int32_t pad_id,
                     const std::function<std::string(size_t)>& item_name) {
  if (row_tokens < 1) throw InputError("rows need at least one token to predict");
  const int64_t capacity = row_tokens + 1;
  for (size_t i = 0; i < items.size(); ++i) {
    const PackItem& it = items[i];
    if (it.ids.size() != it.loss_mask.size()) {
      throw InputError(item_name(i) + ": " + std::to_string(it.ids.size()) + " ids but " +
                       std::to_string(it.loss_mask.size()) + " loss-mask entries");
    }
    if (it.ids.empty()) throw InputError(item_name(i) + " renders to no tokens");
    if (static_cast<int64_t>(it.ids.size()) > capacity) {
      throw InputError(item_name(i) + " is " + std::to_string(it.ids.size()) +
                       " tokens, longer than a training row (" + std::to_string(capacity) +
                       " = sequence length + 1); items are never cropped: shorten it or raise "
                       "the sequence length");
    }
  }
  // Longest first; equal lengths keep their input order.
  std::vector<size_t> order(items.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return items[a].ids.size() > items[b].ids.size(); });
  // Open rows by room left: (room, row) pairs, so the first at or above a length is the
  // tightest fit and, among equal rooms, the earliest row.
  std::map<std::pair<int64_t, int64_t>, bool> by_room;
  std::vector<int64_t> room;
  PackedRows out;
  out.row_tokens = row_tokens;
  for (size_t i : order) {
    const auto len = static_cast<int64_t>(items[i].ids.size());
    auto fit = by_room.lower_bound({len, -1});
    int64_t row;
    if (fit == by_room.end()) {
      row = static_cast<int64_t>(room.size());
      room.push_back(capacity);
      out.items.emplace_back();
    } else {
      row = fit->first.second;
      by_room.erase(fit);
    }
    room[static_cast<size_t>(row)] -= len;
    out.items[static_cast<size_t>(row)].push_back(static_cast<int64_t>(i));
    if (room[static_cast<size_t>(row)] > 0) by_room[{room[static_cast<size_t>(row)], row}] = true;
  }
  out.rows = static_cast<int64_t>(room.size());
  out.ids.assign(static_cast<size_t>(out.rows * capacity), pad_id);
  out.targets.assign(static_cast<size_t>(out.rows * row_tokens), 0);
  for (int64_t r = 0; r < out.rows; ++r) {
    // Within a row, items in input order (the row's content then reads like the data file).
    std::vector<int64_t>& in_row = out.items[static_cast<size_t>(r)];
    std::sort(in_row.begin(), in_row.end());
    int64_t at = 0;
    for (int64_t i : in_row) {
      const PackItem& it = items[static_cast<size_t>(i)];
      for (size_t k = 0; k < it.ids.size(); ++k, ++at) {
        out.ids[static_cast<size_t>(r * capacity + at)] = static_cast<int32_t>(it.ids[k]);
        // Id `at` is the target of input position at - 1.
        if (at > 0 && it.loss_mask[k] != 0) {
          out.targets[static_cast<size_t>(r * row_tokens + at - 1)] = 1;
          ++out.loss_tokens;
        }
      }
      out.item_tokens += static_cast<int64_t>(it.ids.size());
    }
  }
  return out;
}

}  // namespace nanogpt
