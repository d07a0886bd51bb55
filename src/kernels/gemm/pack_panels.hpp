// Packing a set of one operand's micro-panels with a kernel's panel packer: the loop the GEMM
// driver (gemm/driver.cpp) and the grouped GEMM (gemm/grouped_gemm.cpp) share, so both pack in
// the same order and with the same chunking.
#pragma once

#include <algorithm>
#include <cstdint>

#include "kernels/gemm.hpp"
#include "kernels/gemm/microkernel.hpp"

namespace nanogpt::pack {

// k values packed at a time when a source is stored k-major (Y[i][k] = src[k·ld + i]): each
// panel reads only mr or nr values from each of K rows, so packing a whole panel before the
// next would fetch every cache line of those rows once per panel, from wherever the rows are
// (an 8192-row gradient: 0.6 values/ns against 5 when it fits in cache). A chunk of k rows is
// packed into all of a block's panels before the next, so its lines are used up while in L1.
// A multiple of every kernel's k step (at most 32), so packed offsets stay linear in k.
constexpr int64_t kPackChunk = 64;

// The panel numbers [first, last) as a range for pack_panels. (std::views::iota would do, but
// clang 14, which builds the fuzzers, cannot compile it against GCC 12's <ranges>.)
struct PanelRange {
  struct Iterator {
    int64_t q;
    int64_t operator*() const { return q; }
    Iterator& operator++() {
      ++q;
      return *this;
    }
    bool operator!=(const Iterator& o) const { return q != o.q; }
  };
  int64_t first, last;
  Iterator begin() const { return {first}; }
  Iterator end() const { return {last}; }
};

// Packs panels `panels` (any range of panel numbers) of Y, a source of `rows` rows of
// `k_valid` values (Y[i][k] = src[i·ld + k] when order is kNo, src[k·ld + i] when kYes, each
// element source_bytes long), panel q being rows [q·width, q·width + width) with those past
// `rows` zero and k padded with zeros to kp. Whole panels from an i-major source, kPackChunk
// values of k at a time across all the panels from a k-major one: there, given `across` (the
// kernel's MicroKernel::pack_a_across for this source), runs of consecutive panels whose
// places in the packed buffer are evenly spaced are packed by one call, a cache line of each
// source row at a time. offset(q, k) is where panel q's k-th column starts in the packed buffer.
template <class Panels, class Offset>
void pack_panels(PanelPackFn fn, const void* src, int64_t ld, Trans order, int64_t source_bytes,
                 const Panels& panels, int64_t width, int64_t rows, int64_t k_valid, int64_t kp,
                 const Offset& offset, PanelsAcrossPackFn across = nullptr) {
  auto valid = [&](int64_t q) { return std::min(width, rows - q * width); };
  if (order == Trans::kNo) {
    for (const int64_t q : panels) {
      fn(src, ld, order, q * width, valid(q), k_valid, kp, offset(q, 0));
    }
    return;
  }
  auto address = [](auto* p) { return reinterpret_cast<std::uintptr_t>(p); };
  for (int64_t k0 = 0; k0 < kp; k0 += kPackChunk) {
    const int64_t chunk = std::min(kPackChunk, kp - k0);
    const int64_t k_in_chunk = std::clamp<int64_t>(k_valid - k0, 0, chunk);
    // Past the source's last row nothing is read (k_in_chunk = 0), so no pointer is formed.
    const void* chunk_rows =
        k_in_chunk > 0 ? static_cast<const char*>(src) + k0 * ld * source_bytes : src;
    if (across == nullptr) {
      for (const int64_t q : panels) {
        fn(chunk_rows, ld, order, q * width, valid(q), k_in_chunk, chunk, offset(q, k0));
      }
      continue;
    }
    auto it = panels.begin();
    const auto end = panels.end();
    while (it != end) {
      const int64_t q0 = *it;
      auto* const out = offset(q0, k0);
      int64_t count = 1, stride = 0;
      for (++it; it != end && *it == q0 + count; ++it) {
        const auto gap = static_cast<int64_t>(address(offset(*it, k0)) - address(out));
        if (count == 1) stride = gap;
        if (gap != count * stride) break;
        ++count;
      }
      across(chunk_rows, ld, q0 * width, std::min(count * width, rows - q0 * width), k_in_chunk,
             chunk, count, out, stride);
    }
  }
}

}  // namespace nanogpt::pack
