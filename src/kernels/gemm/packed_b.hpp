// A product's op(B) packed once into a micro-kernel's B layout, for a B that many products read
// unchanged: a model's weights between two optimizer steps (decoding and evaluation run the
// same weights thousands of times), the head's W over the fused loss's row blocks. A product
// given it skips packing B, which for a short A costs as much as the arithmetic: decoding 64
// rows through a 256×1024 weight packs 262,144 values to do 64 multiply-adds with each.
//
// The packed copy is the one the driver would have made (same packer, same layout, same
// zero padding), so a product with it gives exactly the bits of the same product without it.
// It belongs to the kernel it was packed for, and products with it run on that kernel.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/gemm.hpp"
#include "kernels/gemm/layout.hpp"
#include "kernels/gemm/microkernel.hpp"
#include "runtime/aligned_memory.hpp"

namespace nanogpt {

struct PackedB {
  const MicroKernel* kernel = nullptr;   // packed for this kernel; null: nothing packed yet
  PackSource source = PackSource::kF32;  // how B was read (the A of its products is read alike)
  int64_t K = 0, N = 0;                  // op(B) is K × N
  int64_t kp = 0;                        // K padded to the kernel's k step (at least one step)
  layout::Layout layout;                 // kernel->b_layout(kp, N rounded up to nr)
  AlignedVector<std::byte> data;         // the panels, as the layout places them

  // Memory held: the panels (kept when a smaller B is packed into the same object).
  size_t bytes() const { return data.capacity(); }
};

// Packs op(B) (K × N; B[k][n] = B[k·ldb + n] when trans_b is kNo, B[n·ldb + k] otherwise) for
// `kernel` reading `source`, into `out` (its memory reused when large enough). Panels are
// packed in parallel on the current thread pool; the result does not depend on the thread
// count. An InputError for a negative K or N; std::invalid_argument if the kernel cannot read
// that source.
void pack_b_operand(const MicroKernel& kernel, PackSource source, Trans trans_b, int64_t K,
                    int64_t N, const void* B, int64_t ldb, PackedB& out);

}  // namespace nanogpt
