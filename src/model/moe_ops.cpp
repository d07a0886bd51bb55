#include "model/moe_ops.hpp"

#include <cmath>
#include <vector>

#include "runtime/profiler.hpp"

namespace nanogpt {

template <class Real>
void moe_route_forward(int64_t T, int64_t E, int64_t k, Real* logits_to_probs, int32_t* expert_ids,
                       Real* gates) {
  ProfileScope scope("elementwise", "moe.route", {T, E, k}, 0.0,
                     4.0 * static_cast<double>(T * (2 * E + 2 * k)));
  std::vector<bool> taken(static_cast<size_t>(E));
  for (int64_t t = 0; t < T; ++t) {
    Real* p = logits_to_probs + t * E;
    Real mx = p[0];
    for (int64_t e = 1; e < E; ++e) mx = std::max(mx, p[e]);
    double sum = 0;
    for (int64_t e = 0; e < E; ++e) {
      p[e] = static_cast<Real>(std::exp(p[e] - mx));
      sum += static_cast<double>(p[e]);
    }
    for (int64_t e = 0; e < E; ++e) p[e] = static_cast<Real>(static_cast<double>(p[e]) / sum);
    // k passes of arg-max over the experts not yet taken (E is small).
    std::fill(taken.begin(), taken.end(), false);
    double chosen = 0;
    for (int64_t s = 0; s < k; ++s) {
      int64_t best = -1;
      for (int64_t e = 0; e < E; ++e) {
        if (!taken[static_cast<size_t>(e)] && (best < 0 || p[e] > p[best])) best = e;
      }
      taken[static_cast<size_t>(best)] = true;
      expert_ids[t * k + s] = static_cast<int32_t>(best);
      chosen += static_cast<double>(p[best]);
    }
    for (int64_t s = 0; s < k; ++s)
      gates[t * k + s] = static_cast<Real>(static_cast<double>(p[expert_ids[t * k + s]]) / chosen);
  }
}

template <class Real>
double load_balancing_loss(const MoePlan& plan, const Real* probs) {
  const int64_t T = plan.tokens, E = plan.experts;
  if (T == 0) return 0.0;
  std::vector<double> mean_p(static_cast<size_t>(E), 0.0);
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t e = 0; e < E; ++e) mean_p[static_cast<size_t>(e)] += probs[t * E + e];
  }
  double aux = 0;
  for (int64_t e = 0; e < E; ++e) {
    const double f = static_cast<double>(plan.offsets[static_cast<size_t>(e) + 1] -
                                         plan.offsets[static_cast<size_t>(e)]) /
                     static_cast<double>(plan.rows());
    aux += f * mean_p[static_cast<size_t>(e)] / static_cast<double>(T);
  }
  return static_cast<double>(E) * aux;
}

template <class Real>
void moe_route_backward(const MoePlan& plan, const Real* probs, const int32_t* expert_ids,
                        const Real* gates, const Real* dgates, double aux_weight, Real* dlogits) {
  const int64_t T = plan.tokens, E = plan.experts, k = plan.top_k;
  ProfileScope scope("elementwise", "moe.route.bwd", {T, E, k}, 0.0,
                     4.0 * static_cast<double>(T * (2 * E + 3 * k)));
  // The aux loss's gradient with respect to p[t, e]: aux_weight·E·f_e / T, the same for every t.
  std::vector<double> daux(static_cast<size_t>(E));
  for (int64_t e = 0; e < E; ++e) {
    const double f = static_cast<double>(plan.offsets[static_cast<size_t>(e) + 1] -
                                         plan.offsets[static_cast<size_t>(e)]) /
                     static_cast<double>(plan.rows());
    daux[static_cast<size_t>(e)] = aux_weight * static_cast<double>(E) * f / static_cast<double>(T);
  }
  std::vector<double> dp(static_cast<size_t>(E));
  for (int64_t t = 0; t < T; ++t) {
    const Real* p = probs + t * E;
    for (int64_t e = 0; e < E; ++e) dp[static_cast<size_t>(e)] = daux[static_cast<size_t>(e)];
    // gate_s = p_s / S, S = Σ_s' p_s': d p_s = (dgate_s − Σ_s' dgate_s'·gate_s') / S.
    double chosen = 0, dot = 0;
    for (int64_t s = 0; s < k; ++s) {
      chosen += static_cast<double>(p[expert_ids[t * k + s]]);
      dot += static_cast<double>(dgates[t * k + s]) * static_cast<double>(gates[t * k + s]);
    }
    for (int64_t s = 0; s < k; ++s) {
      dp[static_cast<size_t>(expert_ids[t * k + s])] +=
          (static_cast<double>(dgates[t * k + s]) - dot) / chosen;
    }
    // Softmax: dlogit_e = p_e·(dp_e − Σ_e' p_e'·dp_e').
    double pdp = 0;
    for (int64_t e = 0; e < E; ++e) pdp += static_cast<double>(p[e]) * dp[static_cast<size_t>(e)];
    for (int64_t e = 0; e < E; ++e) {
      dlogits[t * E + e] =
          static_cast<Real>(static_cast<double>(p[e]) * (dp[static_cast<size_t>(e)] - pdp));
    }
  }
}

template <class Real>
void expert_linear_forward(Precision precision, const char* name, const MoePlan& plan, int64_t n_in,
                           int64_t n_out, const Real* x, const Real* W, Real* y,
                           const ProductEpilogue<Real>& epilogue) {
  model_grouped_gemm_rows(precision, name, plan, Trans::kYes, n_out, n_in, x, n_in, W, n_in,
                          n_out * n_in, y, n_out, epilogue);
}

template <class Real>
void expert_linear_backward_weight(Precision precision, const char* name, const MoePlan& plan,
                                   int64_t n_in, int64_t n_out, const Real* dy, const Real* x,
                                   Real* dW) {
  model_grouped_gemm_reduce(precision, name, plan, n_out, n_in, dy, n_out, x, n_in, dW, n_in,
                            n_out * n_in);
}

template <class Real>
void expert_linear_backward_input(Precision precision, const char* name, const MoePlan& plan,
                                  int64_t n_in, int64_t n_out, const Real* dy, const Real* W,
                                  Real* dx, const ProductEpilogue<Real>& epilogue) {
  model_grouped_gemm_rows(precision, name, plan, Trans::kNo, n_in, n_out, dy, n_out, W, n_in,
                          n_out * n_in, dx, n_in, epilogue);
}

#define NANOGPT_MOE_OPS(Real)                                                                      \
  template void moe_route_forward<Real>(int64_t, int64_t, int64_t, Real*, int32_t*, Real*);        \
  template double load_balancing_loss<Real>(const MoePlan&, const Real*);                          \
  template void moe_route_backward<Real>(const MoePlan&, const Real*, const int32_t*, const Real*, \
                                         const Real*, double, Real*);                              \
  template void expert_linear_forward<Real>(Precision, const char*, const MoePlan&, int64_t,       \
                                            int64_t, const Real*, const Real*, Real*,              \
                                            const ProductEpilogue<Real>&);                         \
  template void expert_linear_backward_weight<Real>(                                               \
      Precision, const char*, const MoePlan&, int64_t, int64_t, const Real*, const Real*, Real*);  \
  template void expert_linear_backward_input<Real>(Precision, const char*, const MoePlan&,         \
                                                   int64_t, int64_t, const Real*, const Real*,     \
                                                   Real*, const ProductEpilogue<Real>&);
NANOGPT_MOE_OPS(float)
NANOGPT_MOE_OPS(double)
#undef NANOGPT_MOE_OPS

}  // namespace nanogpt
