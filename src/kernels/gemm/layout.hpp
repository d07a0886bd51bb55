// Packing layouts as data: a small algebra of index maps, in the spirit of CuTe's layouts and
// linear layouts, from a logical (row, col) coordinate of a packed block to its offset in the
// packed buffer. Each packer's layout is written once here (fp32 panels, AMX tiles, VNNI
// pairs); the packers are tested against it and the drivers locate micro-panels through it,
// so no kernel repeats the index arithmetic.
//
// A layout starts as a rows×cols block (row-major). reshape() splits one logical dimension
// into sub-modes (innermost first: r = r0 + s0·(r1 + s1·r2) ...), permute() lists the modes in
// memory order (outermost first) and recomputes compact strides, and an XOR swizzle can be
// composed on the offset. Every layout built so is a bijection from the block onto
// [0, size()), which tests check exhaustively.
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <stdexcept>

namespace nanogpt::layout {

// One mode: coordinate (coord[dim] / divisor) % shape, times stride.
struct Mode {
  int dim = 0;  // 0: rows, 1: cols
  int64_t shape = 1;
  int64_t divisor = 1;
  int64_t stride = 1;
};

// Which sub-mode of which dimension: the names permute() takes.
struct ModeRef {
  int dim;
  int index;  // 0 is the innermost sub-mode of that dimension
};

// offset ^= ((offset >> shift) & mask(bits)) << base: CuTe's Swizzle<bits, base, shift>,
// which XORs a row index into the column bits so that consecutive rows of a tile start in
// different banks or sets. A bijection on every aligned block of 2^(bits+base+shift).
struct Swizzle {
  int bits = 0, base = 0, shift = 0;
  constexpr int64_t operator()(int64_t offset) const {
    if (bits == 0) return offset;
    const int64_t mask = ((int64_t{1} << bits) - 1) << (base + shift);
    return offset ^ ((offset & mask) >> shift);
  }
};

class Layout {
 public:
  static constexpr int kMaxModes = 8;

  // A rows×cols block, row-major.
  static constexpr Layout block(int64_t rows, int64_t cols) {
    Layout l;
    l.extent_ = {rows, cols};
    l.n_ = 2;
    l.modes_[0] = Mode{0, rows, 1, cols};
    l.modes_[1] = Mode{1, cols, 1, 1};
    return l;
  }

  // Splits dimension `dim` into sub-modes of the given shapes, innermost first; their product
  // must be the dimension's extent. Sub-modes take the place of the dimension's mode in the
  // memory order (innermost sub-mode innermost) until permute() says otherwise.
  constexpr Layout reshape(int dim, std::initializer_list<int64_t> shapes) const {
    Layout out;
    out.extent_ = extent_;
    out.swizzle_ = swizzle_;
    int64_t product = 1;
    for (int64_t s : shapes) product *= s;
    if (product != extent_[dim]) {
      throw std::invalid_argument("layout::reshape: shapes do not multiply to the extent");
    }
    int modes_of_dim = 0;
    for (int i = 0; i < n_; ++i) modes_of_dim += modes_[i].dim == dim ? 1 : 0;
    if (modes_of_dim != 1) throw std::invalid_argument("layout::reshape: dimension already split");
    for (int i = 0; i < n_; ++i) {
      if (modes_[i].dim != dim) {
        out.push(modes_[i]);
        continue;
      }
      // Outermost sub-mode first, keeping memory order outer to inner.
      std::array<int64_t, kMaxModes> list{};
      int count = 0;
      for (int64_t s : shapes) list[count++] = s;
      for (int j = count - 1; j >= 0; --j) {
        int64_t divisor = 1;
        for (int t = 0; t < j; ++t) divisor *= list[t];
        out.push(Mode{dim, list[j], divisor, 0});
      }
    }
    out.compact();
    return out;
  }

  // Puts the modes in the given memory order, outermost first, with compact strides. Every
  // mode must be named exactly once.
  constexpr Layout permute(std::initializer_list<ModeRef> order) const {
    Layout out;
    out.extent_ = extent_;
    out.swizzle_ = swizzle_;
    if (static_cast<int>(order.size()) != n_)
      throw std::invalid_argument("layout::permute: not every mode is named");
    for (ModeRef ref : order) {
      int found = -1;
      for (int i = 0; i < n_; ++i) {
        if (modes_[i].dim == ref.dim && sub_index(i) == ref.index) found = i;
      }
      if (found < 0) throw std::invalid_argument("layout::permute: no such mode");
      for (int j = 0; j < out.n_; ++j) {
        if (out.modes_[j].dim == ref.dim && out.modes_[j].divisor == modes_[found].divisor)
          throw std::invalid_argument("layout::permute: a mode is named twice");
      }
      out.push(modes_[found]);
    }
    out.compact();
    return out;
  }

  // The same offsets, then the swizzle.
  constexpr Layout compose(Swizzle s) const {
    Layout out = *this;
    out.swizzle_ = s;
    return out;
  }

  // The layout of the transposed block: (r, c) here is (c, r) there.
  constexpr Layout transposed() const {
    Layout out = *this;
    out.extent_ = {extent_[1], extent_[0]};
    for (int i = 0; i < n_; ++i) out.modes_[i].dim = 1 - modes_[i].dim;
    return out;
  }

  constexpr int64_t operator()(int64_t r, int64_t c) const {
    return swizzle_(row_part(r) + col_part(c));
  }
  // Without a swizzle the offset separates into a row part and a column part, which lets
  // packers tabulate each once.
  constexpr int64_t row_part(int64_t r) const { return part(0, r); }
  constexpr int64_t col_part(int64_t c) const { return part(1, c); }
  constexpr bool separable() const { return swizzle_.bits == 0; }

  constexpr int64_t size() const { return extent_[0] * extent_[1]; }
  constexpr int64_t rows() const { return extent_[0]; }
  constexpr int64_t cols() const { return extent_[1]; }
  constexpr int modes() const { return n_; }
  constexpr const Mode& mode(int i) const { return modes_[i]; }

 private:
  constexpr void push(Mode m) {
    if (n_ == kMaxModes) throw std::invalid_argument("layout: too many modes");
    modes_[n_++] = m;
  }
  constexpr int sub_index(int i) const {
    int index = 0;
    for (int j = 0; j < n_; ++j) {
      if (modes_[j].dim == modes_[i].dim && modes_[j].divisor < modes_[i].divisor) ++index;
    }
    return index;
  }
  constexpr void compact() {
    int64_t stride = 1;
    for (int i = n_ - 1; i >= 0; --i) {
      modes_[i].stride = stride;
      stride *= modes_[i].shape;
    }
  }
  constexpr int64_t part(int dim, int64_t x) const {
    int64_t offset = 0;
    for (int i = 0; i < n_; ++i) {
      if (modes_[i].dim == dim)
        offset += (x / modes_[i].divisor) % modes_[i].shape * modes_[i].stride;
    }
    return offset;
  }

  std::array<int64_t, 2> extent_{0, 0};
  std::array<Mode, kMaxModes> modes_{};
  int n_ = 0;
  Swizzle swizzle_{};
};

// ---- The packers' layouts. Rows of A are rows of op(A); B's are k. Extents are padded:
// rows to a multiple of the micro-panel, k to the kernel's k step. ----

// fp32 A: micro-panels of mr rows; within one, for each k the mr values of its rows.
constexpr Layout fp32_a(int64_t rows, int64_t k, int64_t mr) {
  return Layout::block(rows, k).reshape(0, {mr, rows / mr}).permute({{0, 1}, {1, 0}, {0, 0}});
}

// fp32 B: micro-panels of nr columns; within one, for each k the nr values of its columns.
constexpr Layout fp32_b(int64_t k, int64_t cols, int64_t nr) {
  return Layout::block(k, cols).reshape(1, {nr, cols / nr}).permute({{1, 1}, {0, 0}, {1, 0}});
}

// AMX A: micro-panels of 32 rows (two tiles); per 32-deep k step, tile 0 (rows 0..15) then
// tile 1 (rows 16..31), each 16 rows × 32 bf16 of k, as TILELOADD reads them with stride 64 B.
constexpr Layout amx_a(int64_t rows, int64_t k) {
  return Layout::block(rows, k)
      .reshape(0, {16, 2, rows / 32})
      .reshape(1, {32, k / 32})
      .permute({{0, 2}, {1, 1}, {0, 1}, {0, 0}, {1, 0}});
}

// AMX B in VNNI form: micro-panels of 32 columns (two tiles); per 32-deep k step, tile 0
// (columns 0..15) then tile 1, each 16 rows of k pairs × 16 columns × the pair (k even, k odd).
constexpr Layout amx_b(int64_t k, int64_t cols) {
  return Layout::block(k, cols)
      .reshape(0, {2, 16, k / 32})
      .reshape(1, {16, 2, cols / 32})
      .permute({{1, 2}, {0, 2}, {1, 1}, {0, 1}, {1, 0}, {0, 0}});
}

// AVX512-BF16 A: micro-panels of mr rows; per k pair, the pairs of the mr rows (broadcast one
// 32-bit pair per row into VDPBF16PS).
constexpr Layout vnni_a(int64_t rows, int64_t k, int64_t mr) {
  return Layout::block(rows, k)
      .reshape(0, {mr, rows / mr})
      .reshape(1, {2, k / 2})
      .permute({{0, 1}, {1, 1}, {0, 0}, {1, 0}});
}

// AVX512-BF16 B: micro-panels of nr columns; per k pair, nr (k even, k odd) pairs.
constexpr Layout vnni_b(int64_t k, int64_t cols, int64_t nr) {
  return Layout::block(k, cols)
      .reshape(0, {2, k / 2})
      .reshape(1, {nr, cols / nr})
      .permute({{1, 1}, {0, 1}, {1, 0}, {0, 0}});
}

}  // namespace nanogpt::layout
