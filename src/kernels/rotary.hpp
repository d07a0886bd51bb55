// Half-truncated rotary position embedding (the seed's Rotary): head_dim/4 angular
// frequencies (1/1024)^linspace(0, 1, head_dim/4) followed by head_dim/4 zeros, so half of
// each head's dimensions carry position and half do not. With x = (x1, x2) the two halves:
//   y1 = x1·cos + x2·sin,  y2 = −x1·sin + x2·cos.
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

#include "kernels/target.hpp"

namespace nanogpt {

// Rotates `heads` heads of head_dim values in place by one position's cos c and sin s (head_dim
// / 2 each), turned by `direction` (+1: forward, −1: inverse). Always inlined so that the float
// version's clones (rotary.cpp) each compile it for their own ISA.
template <class Real>
NANOGPT_ALWAYS_INLINE void rotate_heads_rows(Real* x, int64_t heads, int64_t head_dim,
                                             const Real* c, const Real* s, Real direction) {
  const int64_t half = head_dim / 2;
  for (int64_t h = 0; h < heads; ++h) {
    Real* x1 = x + h * head_dim;
    Real* x2 = x1 + half;
    for (int64_t j = 0; j < half; ++j) {
      const Real a = x1[j], b = x2[j], sj = direction * s[j];
      x1[j] = a * c[j] + b * sj;
      x2[j] = -a * sj + b * c[j];
    }
  }
}

// The float version is compiled for AVX-512, AVX2 and the baseline, each giving the same bits.
void rotate_heads(float* x, int64_t heads, int64_t head_dim, const float* c, const float* s,
                  float direction);
inline void rotate_heads(double* x, int64_t heads, int64_t head_dim, const double* c,
                         const double* s, double direction) {
  rotate_heads_rows(x, heads, head_dim, c, s, direction);
}

template <class Real>
class RotaryTableT {
 public:
  RotaryTableT() = default;
  RotaryTableT(int64_t max_positions, int64_t head_dim)
      : max_positions_(max_positions), head_dim_(head_dim) {
    const int64_t half = head_dim / 2, quarter = head_dim / 4;
    cos_.resize(static_cast<size_t>(max_positions * half));
    sin_.resize(cos_.size());
    for (int64_t t = 0; t < max_positions; ++t) {
      for (int64_t j = 0; j < half; ++j) {
        // Angles in double, then rounded: at t ~ 10^4 float32 angles drift by ~1e-3 rad.
        double freq = 0.0;
        if (j < quarter) {
          double frac =
              quarter == 1 ? 0.0 : static_cast<double>(j) / static_cast<double>(quarter - 1);
          freq = std::pow(1.0 / 1024.0, frac);
        }
        const double theta = static_cast<double>(t) * freq;
        cos_[static_cast<size_t>(t * half + j)] = static_cast<Real>(std::cos(theta));
        sin_[static_cast<size_t>(t * half + j)] = static_cast<Real>(std::sin(theta));
      }
    }
  }
  int64_t head_dim() const { return head_dim_; }
  // One position's cos and sin, head_dim / 2 values each.
  const Real* cos_row(int64_t position) const { return cos_.data() + position * (head_dim_ / 2); }
  const Real* sin_row(int64_t position) const { return sin_.data() + position * (head_dim_ / 2); }
  int64_t max_positions() const { return max_positions_; }

  // Rotates `heads` heads of one token at `position` in place (x: heads × head_dim, contiguous).
  void apply(Real* x, int64_t heads, int64_t position) const {
    rotate(x, heads, position, Real(1));
  }
  // The transpose of apply (its inverse): the backward of a rotation.
  void apply_inverse(Real* x, int64_t heads, int64_t position) const {
    rotate(x, heads, position, Real(-1));
  }

 private:
  void rotate(Real* x, int64_t heads, int64_t position, Real direction) const {
    rotate_heads(x, heads, head_dim_, cos_row(position), sin_row(position), direction);
  }

  int64_t max_positions_ = 0, head_dim_ = 0;
  std::vector<Real> cos_, sin_;  // [position][head_dim / 2]
};

using RotaryTable = RotaryTableT<float>;

}  // namespace nanogpt
