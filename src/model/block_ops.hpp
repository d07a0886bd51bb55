// The GPT's named operations, forward and backward: each is one pass (or one product) over T
// token rows, so a block reads top to bottom as a column of named calls on named activations
// (gpt.cpp). Element-wise passes run over fixed blocks of 32 token rows on the thread pool and
// sum their reductions per block, in block order, so results are bitwise the same on any
// number of threads. Templated on the scalar type: float trains, double runs the same math for
// finite-difference checks (explicit instantiations in block_ops.cpp).
#pragma once

#include <array>
#include <cstdint>

#include "kernels/bf16.hpp"
#include "kernels/rotary.hpp"
#include "model/model_kernels.hpp"
#include "model/qkv_shape.hpp"

namespace nanogpt {

// --- Linear layers: y = x·Wᵀ for T rows, W [n_out, n_in] (PyTorch's nn.Linear layout). -------

// A [T, n] activation or gradient that only products (and their epilogues) read. With bf16
// products on float (they round their operands to bf16 as they pack them) it is stored already
// rounded, in `rounded`: half the bytes written and read, the same bits for the products, and a
// bf16 A with k contiguous is read in place, not packed. Otherwise, and always for double, in
// `values`. Exactly one of the two is set.
template <class Real>
struct ProductRows {
  Real* values = nullptr;
  bf16* rounded = nullptr;
};

// y = x·Wᵀ + beta·y, then the epilogue: a residual (ProductEpilogue::residual R:
// y = R + x·Wᵀ, a branch's projection landing on the residual stream) or relu²
// (ProductEpilogue::relu_squared: y = relu²(x·Wᵀ), the MLP's c_fc). `packed`: W already packed
// for the product (model/packed_weights.hpp; float only), or null.
template <class Real>
void linear_forward(Precision precision, const char* name, int64_t T, int64_t n_in, int64_t n_out,
                    const Real* x, const Real* W, Real beta, Real* y,
                    const ProductEpilogue<Real>& epilogue = {}, const PackedB* packed = nullptr);
// The same into y as it is stored (beta 0): the MLP's h = relu²(x·Wᵀ), which only c_proj's
// products and the relu² gradient read.
template <class Real>
void linear_forward(Precision precision, const char* name, int64_t T, int64_t n_in, int64_t n_out,
                    const Real* x, const Real* W, ProductRows<Real> y,
                    const ProductEpilogue<Real>& epilogue, const PackedB* packed);
// The same from x as it is stored.
template <class Real>
void linear_forward(Precision precision, const char* name, int64_t T, int64_t n_in, int64_t n_out,
                    ProductRows<Real> x, const Real* W, Real beta, Real* y,
                    const ProductEpilogue<Real>& epilogue, const PackedB* packed);
// From x as it is stored into y as it is stored (the MLP's c_fc from norm2's rows).
template <class Real>
void linear_forward(Precision precision, const char* name, int64_t T, int64_t n_in, int64_t n_out,
                    ProductRows<Real> x, const Real* W, ProductRows<Real> y,
                    const ProductEpilogue<Real>& epilogue, const PackedB* packed);
// dW += dyᵀ·x.
template <class Real>
void linear_backward_weight(Precision precision, const char* name, int64_t T, int64_t n_in,
                            int64_t n_out, const Real* dy, const Real* x, Real* dW);
// dx = dy·W, with an optional epilogue (relu_squared_output H: dx becomes the gradient of the
// relu²'s input, 2·√H·dx, mlp.c_proj's input gradient).
template <class Real>
void linear_backward_input(Precision precision, const char* name, int64_t T, int64_t n_in,
                           int64_t n_out, const Real* dy, const Real* W, Real* dx,
                           const ProductEpilogue<Real>& epilogue = {});

// dx = dy·W with the epilogue, into dx as it is stored.
template <class Real>
void linear_backward_input(Precision precision, const char* name, int64_t T, int64_t n_in,
                           int64_t n_out, const Real* dy, const Real* W, ProductRows<Real> dx,
                           const ProductEpilogue<Real>& epilogue);
// dW += dyᵀ·x and dx = dy·W, from dy (or x) as it is stored.
template <class Real>
void linear_backward_weight(Precision precision, const char* name, int64_t T, int64_t n_in,
                            int64_t n_out, ProductRows<Real> dy, const Real* x, Real* dW);
template <class Real>
void linear_backward_weight(Precision precision, const char* name, int64_t T, int64_t n_in,
                            int64_t n_out, const Real* dy, ProductRows<Real> x, Real* dW);
template <class Real>
void linear_backward_weight(Precision precision, const char* name, int64_t T, int64_t n_in,
                            int64_t n_out, ProductRows<Real> dy, ProductRows<Real> x, Real* dW);
template <class Real>
void linear_backward_input(Precision precision, const char* name, int64_t T, int64_t n_in,
                           int64_t n_out, ProductRows<Real> dy, const Real* W, Real* dx);
// dx = dy·W with the epilogue, from dy as it is stored into dx as it is stored.
template <class Real>
void linear_backward_input(Precision precision, const char* name, int64_t T, int64_t n_in,
                           int64_t n_out, ProductRows<Real> dy, const Real* W, ProductRows<Real> dx,
                           const ProductEpilogue<Real>& epilogue);

// --- Norms and the residual stream ([T, d] rows). ---------------------------------------------

// x0 = rmsnorm(embed[tokens]).
template <class Real>
void embed_norm_forward(int64_t T, int64_t d, const int32_t* tokens, const Real* embed, Real* x0,
                        Real* rstd0);
// dembed[tokens] += rmsnorm'(dx0 + dx): the embedding's gradient from x0's (dx0, the x0 mixes
// of every block) and the first block's input's (dx). Rows of a repeated token are summed
// serially, in token order. dnorm is scratch.
template <class Real>
void embed_norm_backward(int64_t T, int64_t d, const int32_t* tokens, const Real* x0,
                         const Real* rstd0, Real* dx0, const Real* dx, Real* dnorm, Real* dembed);

// The residual mix at a block's entry, in one pass:
//   x_in = x_prev + skip·skip_src  (skip_src null: x_in = x_prev; the U-net's second half)
//   x_mix = λ0·x_in + λ1·x0 (x0 null: x_mix = x_in, no mixing; l0, l1 unused)
//   x_res = x_mix (x_res null: not copied; a block whose attention projection adds x_mix in
//   its epilogue, ProductEpilogue::residual, needs no copy)
//   norm = rmsnorm(x_mix), rstd   (norm null: not computed; attention-free blocks)
//   norm_rounded = norm rounded to bf16 (if not null; float only): the rows the products read
template <class Real>
void residual_mix_forward(int64_t T, int64_t d, const Real* x_prev, const Real* skip_src, Real skip,
                          const Real* x0, Real l0, Real l1, Real* x_in, Real* x_mix, Real* x_res,
                          Real* norm, Real* rstd, bf16* norm_rounded = nullptr);
// Backward of the mix. dx holds d(x_mix) on entry and d(x_prev) on return; dx0 += λ1·dx_mix
// (x0 null: no mixing, dx0 untouched), dskip_src += skip·d(x_in) (if skip_src); dx_rounded =
// d(x_prev) rounded to bf16, if not null (float only: as rmsnorm_rows_backward's). Returns
// Σ d(x_mix)·x_in, Σ d(x_mix)·x0 (the lambdas' gradients; 0 without x0) and Σ d(x_in)·skip_src
// (the skip weight's).
template <class Real>
std::array<double, 3> residual_mix_backward(int64_t T, int64_t d, const Real* x_in, const Real* x0,
                                            const Real* skip_src, Real skip, Real l0, Real l1,
                                            Real* dx, Real* dx0, Real* dskip_src,
                                            bf16* dx_rounded = nullptr);

// y = rmsnorm(x) (and copy = x, if not null: the residual a branch adds to in place, as the
// experts' combine does; y_rounded = y rounded to bf16, if not null, float only: the rows the
// products read), by rows.
template <class Real>
void rmsnorm_rows_forward(const char* name, int64_t T, int64_t d, const Real* x, Real* y,
                          Real* rstd, Real* copy = nullptr, bf16* y_rounded = nullptr);
// dx = rmsnorm'(dy) (accumulate: dx += rmsnorm'(dy)), by rows; dx_rounded = the new dx rounded
// to bf16, if not null (float only): for products that read dx next and round it as they pack
// it, here while its rows are still in cache.
template <class Real>
void rmsnorm_rows_backward(const char* name, int64_t T, int64_t d, const Real* y, const Real* rstd,
                           const Real* dy, Real* dx, bool accumulate, bf16* dx_rounded = nullptr);
// dx += ds: a skip's gradient joins the residual's (dx_rounded: as rmsnorm_rows_backward's).
template <class Real>
void add_rows(const char* name, int64_t T, int64_t d, const Real* ds, Real* dx,
              bf16* dx_rounded = nullptr);

// --- Attention's inputs. ----------------------------------------------------------------------

// From the projection's raw rows to attention's inputs, one pass:
//   q, k = rope(rmsnorm per head(q, k)) at position pos[t]; rstd_qk [T, Hq + Hkv]
//   v = λa0·v + λa1·ve[tokens[t]]   (ve null: v = λa0·v); ve rows are kv_width wide
template <class Real>
void qk_norm_rotary_v_mix_forward(int64_t T, const QkvShape& s, const RotaryTableT<Real>& rotary,
                                  const int64_t* pos, const int32_t* tokens, const Real* ve,
                                  Real la0, Real la1, const Real* raw, Real* rstd_qk, Real* qkv,
                                  bf16* qkv_rounded = nullptr);
// Where qkv_rounded is set (float only), the rows go there rounded to bf16 instead of to qkv
// (null): with bf16 products attention reads nothing else (its packers would round them,
// AttentionParams::q_bf16), and the backward recomputes the rows it needs from raw.
// Backward: dqkv (attention's input gradients) becomes the gradient of raw, in place, or, where
// dqkv_rounded is set, goes there rounded to bf16 and dqkv is only read (the gradient of raw is
// read only by the qkv projection's products, which would round it as they pack it: half the
// bytes, and the same bits); dve[tokens[t]] += λa1·dv (in token order). The norm's outputs are
// recomputed from raw and rstd_qk, so the forward's rows (stored in full or rounded) are not
// read. Returns Σ dv·v_raw and Σ dv·ve (the attention lambdas' gradients).
template <class Real>
std::array<double, 2> qk_norm_rotary_v_mix_backward(int64_t T, const QkvShape& s,
                                                    const RotaryTableT<Real>& rotary,
                                                    const int64_t* pos, const int32_t* tokens,
                                                    const Real* ve, Real* dve, Real la0, Real la1,
                                                    const Real* raw, const Real* rstd_qk,
                                                    Real* dqkv, bf16* dqkv_rounded = nullptr);

}  // namespace nanogpt
