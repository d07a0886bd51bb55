// The MLP activation of the seed: relu(x)², for the decoder. Training fuses it and its backward
// into the GEMM epilogues around it (kernels/gemm.hpp, GemmEpilogue).
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

}  // namespace nanogpt
