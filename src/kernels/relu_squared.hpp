// The MLP activation of the seed: relu(x)².
#pragma once

#include <cstdint>

namespace nanogpt {

template <class Real>
void relu_squared_forward(const Real* x, Real* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    Real r = x[i] > Real(0) ? x[i] : Real(0);
    y[i] = r * r;
  }
}

// dx = dy · 2·relu(x). dx may alias dy.
template <class Real>
void relu_squared_backward(const Real* x, const Real* dy, Real* dx, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dx[i] = x[i] > Real(0) ? Real(2) * x[i] * dy[i] : Real(0);
}

}  // namespace nanogpt
