#include "kernels/gemm/tile_gemm.hpp"

#include <immintrin.h>

#include <algorithm>
#include <string>

#include "kernels/gemm/layout.hpp"
#include "runtime/error.hpp"

namespace nanogpt {

TileGemm::TileGemm(const MicroKernel& kernel, Precision precision, int64_t tile, int64_t D)
    : kernel_(kernel),
      source_(precision == Precision::kBf16 ? PackSource::kF32ToBf16 : PackSource::kF32),
      mr_(kernel.mr),
      nr_(kernel.nr),
      ks_(kernel.k_step),
      bytes_(kernel.packed_bytes),
      from_f32_{kernel.pack_a[static_cast<int>(source_)], kernel.pack_b[static_cast<int>(source_)],
                kernel.pack_a_across[static_cast<int>(source_)]},
      tile_(tile),
      rows_(round_up(tile, kernel.mr)),
      dk_(round_up(D, kernel.k_step)),
      dn_(round_up(D, kernel.nr)) {
  if (precision == Precision::kBf16) {
    const int bf16_source = static_cast<int>(PackSource::kBf16);
    from_bf16_ = {kernel.pack_a[bf16_source], kernel.pack_b[bf16_source],
                  kernel.pack_a_across[bf16_source]};
  }
  if (from_f32_.a == nullptr || from_f32_.b == nullptr || tile_ % nr_ != 0 || tile_ % ks_ != 0) {
    throw Error(std::string("attention: the ") + kernel.isa + " micro-kernel cannot run " +
                (precision == Precision::kBf16 ? "bf16" : "fp32") + " tile products of " +
                std::to_string(tile) + " tokens (it needs packers for that precision, and nr " +
                "and k step dividing the tile)");
  }
  const layout::Layout la_d = kernel.a_layout(rows_, dk_), la_t = kernel.a_layout(rows_, tile_);
  const layout::Layout lb_d = kernel.b_layout(dk_, tile_), lb_t = kernel.b_layout(tile_, dn_);
  // Micro-panels are located by row part and column part (offsets_, and product()'s k start).
  for (const layout::Layout& l : {la_d, la_t, lb_d, lb_t}) {
    if (!l.separable()) {
      throw Error(std::string("attention: the ") + kernel.isa +
                  " micro-kernel's packed layouts are swizzled; tile products need separable ones");
    }
  }
  layouts_[static_cast<int>(Block::kRowsByD)] = la_d;
  layouts_[static_cast<int>(Block::kRowsByTile)] = la_t;
  layouts_[static_cast<int>(Block::kTileByD)] = lb_d;
  layouts_[static_cast<int>(Block::kDByTile)] = lb_t;
  for (int64_t i = 0; i < rows_; i += mr_) {
    offsets(Block::kRowsByD).push_back(la_d(i, 0) * bytes_);
    offsets(Block::kRowsByTile).push_back(la_t(i, 0) * bytes_);
  }
  for (int64_t j = 0; j < tile_; j += nr_) offsets(Block::kTileByD).push_back(lb_d(0, j) * bytes_);
  for (int64_t j = 0; j < dn_; j += nr_) offsets(Block::kDByTile).push_back(lb_t(0, j) * bytes_);
  for (int b = 0; b < 4; ++b) {
    const std::vector<int64_t>& off = offsets_[b];
    for (size_t p = 1; p < off.size(); ++p) {
      evenly_spaced_[b] = evenly_spaced_[b] && off[p] - off[p - 1] == off[1] - off[0];
    }
  }
  size_[static_cast<int>(Block::kRowsByD)] = rows_ * dk_ * bytes_;
  size_[static_cast<int>(Block::kRowsByTile)] = rows_ * tile_ * bytes_;
  size_[static_cast<int>(Block::kTileByD)] = tile_ * dk_ * bytes_;
  size_[static_cast<int>(Block::kDByTile)] = tile_ * dn_ * bytes_;
}

void TileGemm::pack_a(const float* src, int64_t ld, Trans trans, int64_t valid, int64_t k_valid,
                      Block b, std::byte* out) const {
  pack_a_with(from_f32_, src, ld, trans, valid, k_valid, b, out);
}

void TileGemm::pack_b(const float* src, int64_t ld, Trans trans, int64_t valid, int64_t k_valid,
                      Block b, std::byte* out) const {
  pack_b_with(from_f32_, src, ld, trans, valid, k_valid, b, out);
}

void TileGemm::pack_a(const bf16* src, int64_t ld, Trans trans, int64_t valid, int64_t k_valid,
                      Block b, std::byte* out) const {
  pack_a_with(from_bf16_, src, ld, trans, valid, k_valid, b, out);
}

void TileGemm::pack_b(const bf16* src, int64_t ld, Trans trans, int64_t valid, int64_t k_valid,
                      Block b, std::byte* out) const {
  pack_b_with(from_bf16_, src, ld, trans, valid, k_valid, b, out);
}

void TileGemm::pack_a_with(const Packers& with, const void* src, int64_t ld, Trans trans,
                           int64_t valid, int64_t k_valid, Block b, std::byte* out) const {
  if (with.a == nullptr) {
    throw Error("attention: bf16 operands need bf16 tile products (precision bf16)");
  }
  const std::vector<int64_t>& off = offsets(b);
  const int64_t kp = k_steps(k_valid), panels = ceil_div(valid, mr_);
  // From a source contiguous in i, the tile's panels in one call where they lie evenly spaced
  // (MicroKernel::pack_a_across).
  if (trans == Trans::kYes && with.a_across != nullptr && evenly_spaced_[static_cast<int>(b)]) {
    with.a_across(src, ld, 0, valid, k_valid, kp, panels, out,
                  off.size() > 1 ? off[1] - off[0] : 0);
    return;
  }
  for (int64_t p = 0; p < panels; ++p) {
    const int64_t first = p * mr_;
    with.a(src, ld, trans, first, std::min(valid - first, mr_), k_valid, kp,
           out + off[static_cast<size_t>(p)]);
  }
}

void TileGemm::pack_b_with(const Packers& with, const void* src, int64_t ld, Trans trans,
                           int64_t valid, int64_t k_valid, Block b, std::byte* out) const {
  if (with.b == nullptr) {
    throw Error("attention: bf16 operands need bf16 tile products (precision bf16)");
  }
  const std::vector<int64_t>& off = offsets(b);
  const int64_t kp = k_steps(k_valid), panels = ceil_div(valid, nr_);
  for (int64_t p = 0; p < panels; ++p) {
    const int64_t first = p * nr_;
    with.b(src, ld, trans, first, std::min(valid - first, nr_), k_valid, kp,
           out + off[static_cast<size_t>(p)]);
  }
}

namespace {

// The k range [begin, end) a micro-tile at (ip, jp) of a product runs over, given the causal
// rule's part of the tile hidden (TileGemm::product): empty where only hidden pairs make it.
struct Depth {
  int64_t begin, end;
};
Depth causal_depth(const CausalSkip& skip, int64_t ip, int64_t jp, int64_t mr, int64_t nr,
                   int64_t ks, int64_t kc) {
  switch (skip.axes) {
    case CausalAxes::kKeysByQueries:  // every key of the micro-tile after its last query
      return {0, ip > jp + nr - 1 + skip.delta ? 0 : kc};
    case CausalAxes::kQueriesByKeys:
      return {0, jp > ip + mr - 1 + skip.delta ? 0 : kc};
    case CausalAxes::kQueriesOverKeys:  // up to the last key the row block's last query sees
      return {0, std::min(kc, round_up(std::max<int64_t>(ip + mr + skip.delta, 0), ks))};
    case CausalAxes::kKeysOverQueries:  // from the first query the row block's first key meets
      return {std::min(kc, std::max<int64_t>(ip - skip.delta, 0) / ks * ks), kc};
  }
  return {0, kc};
}

}  // namespace

void TileGemm::product(int64_t rows, int64_t cols, int64_t kc, const std::byte* a, Block ba,
                       const std::byte* b, Block bb, float* c, int64_t ldc, bool accumulate,
                       const CausalSkip* skip) const {
  const std::vector<int64_t>& a_off = offsets(ba);
  const std::vector<int64_t>& b_off = offsets(bb);
  const layout::Layout& la = layouts_[static_cast<int>(ba)];
  const layout::Layout& lb = layouts_[static_cast<int>(bb)];
  for (int64_t jp = 0; jp < cols; jp += nr_) {
    const std::byte* bp = b + b_off[static_cast<size_t>(jp / nr_)];
    for (int64_t ip = 0; ip < rows; ip += mr_) {
      Depth k{0, kc};
      if (skip != nullptr) {
        k = causal_depth(*skip, ip, jp, mr_, nr_, ks_, kc);
        // A score micro-tile left out keeps c's old values; a product over keys or queries with
        // nothing to add leaves an accumulated c as it is, but one that overwrites must write.
        const bool scores =
            skip->axes == CausalAxes::kKeysByQueries || skip->axes == CausalAxes::kQueriesByKeys;
        if (k.begin >= k.end) {
          if (accumulate || scores) continue;
          k = {0, kc};
        }
      }
      // The layouts' parts cost a division per mode: only for a start past k = 0 (on every
      // call they slowed the training step's attention backward by 5-10%).
      const int64_t a_k = k.begin == 0 ? 0 : la.col_part(k.begin) * bytes_;
      const int64_t b_k = k.begin == 0 ? 0 : lb.row_part(k.begin) * bytes_;
      kernel_.fn(k.end - k.begin, a + a_off[static_cast<size_t>(ip / mr_)] + a_k, bp + b_k,
                 c + ip * ldc + jp, ldc, accumulate);
    }
  }
}

void TileGemm::store(const float* acc, int64_t ld_acc, int64_t rows, int64_t cols, float alpha,
                     float* dst, int64_t ld) const {
  if (kernel_.stream != nullptr && ld % 16 == 0 && reinterpret_cast<uintptr_t>(dst) % 64 == 0) {
    kernel_.stream(acc, ld_acc, rows, cols, alpha, 0.0f, dst, ld, nullptr, 0, 0);
    // Non-temporal stores are weakly ordered: visible before the task counts as done.
    _mm_sfence();
    return;
  }
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t j = 0; j < cols; ++j) dst[i * ld + j] = alpha * acc[i * ld_acc + j];
  }
}

}  // namespace nanogpt
