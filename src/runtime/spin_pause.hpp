// The pause hint for spin-wait loops, the one copy the pool and the kernels use.
#pragma once

#include <immintrin.h>

namespace nanogpt {

// In a spin-wait loop: tells the core the loop spins (saves power, and the pipeline flush when
// it ends).
inline void spin_pause() {
  _mm_pause();
}

}  // namespace nanogpt
