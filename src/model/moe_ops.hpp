// The named operations of a mixture-of-experts MLP (gpt.cpp), forward and backward:
//
//   p = softmax(x·routerᵀ)                  [T, E] router probabilities (fp32 logits)
//   top-k of p per token → experts, gates    gates = the chosen p renormalised over the k
//   xe = gather(x)                           the tokens' rows in expert order (moe_routing.hpp)
//   he = relu²(xe_g·c_fc_gᵀ), ye = he_g·c_projᵀ_g   grouped GEMMs, one group per expert
//   y += Σ_s gate_s·ye[row of (t, s)]        the combine back to the tokens
//   aux = E·Σ_e f_e·P_e                      Switch/GShard load balancing: f_e the fraction of
//                                            the T·k assignments routed to e, P_e the mean of p
//
// Dropless (no capacity, every assignment is computed, as MegaBlocks). The aux loss's gradient
// flows through P only (f is piecewise constant). Router passes are serial over T·E values, in
// token order, so every result is bitwise the same for any number of threads; the products and
// the permutation are the thread-invariant kernels'. Templated on the scalar type as
// block_ops.hpp (explicit instantiations in moe_ops.cpp).
#pragma once

#include <cstdint>

#include "kernels/moe_routing.hpp"
#include "model/model_kernels.hpp"

namespace nanogpt {

// In place: logits_to_probs holds x·routerᵀ on entry and the softmax on return. expert_ids and
// gates ([T·k]) receive each token's k most probable experts, most probable first (ties: lower
// expert first), and their probabilities divided by their sum.
template <class Real>
void moe_route_forward(int64_t T, int64_t E, int64_t k, Real* logits_to_probs, int32_t* expert_ids,
                       Real* gates);

// E·Σ_e f_e·P_e for the routing of `plan` and the router probabilities [T, E].
template <class Real>
double load_balancing_loss(const MoePlan& plan, const Real* probs);

// The router's backward: dlogits [T, E] from the gates' gradient dgates [T·k] (through the
// renormalisation and the softmax) and from the load-balancing loss, weighted aux_weight in the
// objective (its gradient aux_weight·E·f_e/T per token and expert, through P).
template <class Real>
void moe_route_backward(const MoePlan& plan, const Real* probs, const int32_t* expert_ids,
                        const Real* gates, const Real* dgates, double aux_weight, Real* dlogits);

// The experts' linear layers over the groups of `plan` (weights stacked [E, n_out, n_in]):
// y_g = x_g·W_gᵀ (with an optional relu² epilogue, as linear_forward),
template <class Real>
void expert_linear_forward(Precision precision, const char* name, const MoePlan& plan, int64_t n_in,
                           int64_t n_out, const Real* x, const Real* W, Real* y,
                           const ProductEpilogue<Real>& epilogue = {});
// dW_g += dy_gᵀ·x_g,
template <class Real>
void expert_linear_backward_weight(Precision precision, const char* name, const MoePlan& plan,
                                   int64_t n_in, int64_t n_out, const Real* dy, const Real* x,
                                   Real* dW);
// dx_g = dy_g·W_g (with an optional relu² gradient epilogue, as linear_backward_input).
template <class Real>
void expert_linear_backward_input(Precision precision, const char* name, const MoePlan& plan,
                                  int64_t n_in, int64_t n_out, const Real* dy, const Real* W,
                                  Real* dx, const ProductEpilogue<Real>& epilogue = {});

}  // namespace nanogpt
