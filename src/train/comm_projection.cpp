#include "train/comm_projection.hpp"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <set>

#include "runtime/error.hpp"

namespace nanogpt {

double ring_allreduce_seconds(double bytes, int ranks, const RingLink& link) {
  if (ranks <= 1) return 0;
  const double hops = ranks - 1;
  return 2 * hops * link.alpha_s + 2 * hops / ranks * bytes / link.beta_bytes_per_s;
}

double ring_allgather_seconds(double bytes, int ranks, const RingLink& link) {
  if (ranks <= 1) return 0;
  const double hops = ranks - 1;
  return hops * link.alpha_s + hops / ranks * bytes / link.beta_bytes_per_s;
}

AllreduceFit fit_ring_allreduce(const std::vector<AllreduceSample>& samples, int ranks) {
  if (ranks < 2) throw Error("internal: an all-reduce fit needs at least 2 ranks");
  std::set<double> sizes;
  double max_bytes = 0;
  for (const AllreduceSample& s : samples) {
    if (!(s.seconds > 0) || !(s.bytes > 0)) {
      throw Error("internal: an all-reduce sample of " + std::to_string(s.bytes) + " bytes took " +
                  std::to_string(s.seconds) + " s; sizes and times must be positive");
    }
    sizes.insert(s.bytes);
    max_bytes = std::max(max_bytes, s.bytes);
  }
  if (sizes.size() < 2) throw Error("internal: an all-reduce fit needs two message sizes or more");
  // Sizes in units of the largest keep the normal equations well conditioned.
  double s0 = 0, s1 = 0, s2 = 0, t0 = 0, t1 = 0;
  for (const AllreduceSample& s : samples) {
    const double w = 1 / (s.seconds * s.seconds), x = s.bytes / max_bytes;
    s0 += w;
    s1 += w * x;
    s2 += w * x * x;
    t0 += w * s.seconds;
    t1 += w * x * s.seconds;
  }
  double slope = (s0 * t1 - s1 * t0) / (s0 * s2 - s1 * s1);
  double intercept = (t0 - slope * s1) / s0;
  if (intercept < 0) {  // a negative latency means nothing: the best line through the origin
    intercept = 0;
    slope = t1 / s2;
  }
  slope /= max_bytes;
  if (!(slope > 0)) {
    throw Error("the all-reduce times do not grow with the message size: no bandwidth to fit");
  }
  AllreduceFit fit;
  fit.link.alpha_s = intercept / (2.0 * (ranks - 1));
  fit.link.beta_bytes_per_s = 2.0 * (ranks - 1) / ranks / slope;
  for (const AllreduceSample& s : samples) {
    const double model = ring_allreduce_seconds(s.bytes, ranks, fit.link);
    fit.max_relative_error =
        std::max(fit.max_relative_error, std::abs(model - s.seconds) / s.seconds);
  }
  return fit;
}

namespace {

// The block index of a parameter named "blocks.I.…", or -1.
int64_t block_of(const std::string& name) {
  const std::string prefix = "blocks.";
  if (name.compare(0, prefix.size(), prefix) != 0) return -1;
  return std::strtoll(name.c_str() + prefix.size(), nullptr, 10);
}

// K of "value_embeds.K.weight", or -1.
int value_embed_of(const std::string& name) {
  const std::string prefix = "value_embeds.";
  if (name.compare(0, prefix.size(), prefix) != 0) return -1;
  return static_cast<int>(std::strtol(name.c_str() + prefix.size(), nullptr, 10));
}

}  // namespace

std::vector<GradientTensor> gradients_in_backward_order(const std::vector<ParamTensor>& tensors,
                                                        const Config& config,
                                                        double head_backward_share) {
  const int64_t L = config.num_layers;
  // Block i's backward ends at this fraction of the backward.
  auto block_done = [&](int64_t i) {
    return head_backward_share +
           static_cast<double>(L - i) * (1 - head_backward_share) / static_cast<double>(L);
  };
  std::vector<GradientTensor> out;
  // Reversed: within one block the backward meets the tensors last-added first.
  for (auto it = tensors.rbegin(); it != tensors.rend(); ++it) {
    GradientTensor g;
    g.name = it->name;
    g.bytes = 4.0 * static_cast<double>(it->numel);
    g.ready_fraction = 1;  // the token embedding, skip weights, anything not placed below
    if (it->name == "lm_head.weight") {
      g.ready_fraction = head_backward_share;
    } else if (const int64_t b = block_of(it->name); b >= 0) {
      g.ready_fraction = block_done(b);
    } else if (const int k = value_embed_of(it->name); k >= 0) {
      for (int64_t i = 0; i < L; ++i) {
        if (config.value_embed_index(i) == k) {
          g.ready_fraction = block_done(i);  // the lowest block using it: the last to add to it
          break;
        }
      }
    }
    if (it->group == ParamGroup::kMatrix && config.matrix_optimizer == MatrixOptimizer::kMuon) {
      g.muon_matrices = it->shape.size() == 3 ? it->shape[0] : 1;
    }
    out.push_back(std::move(g));
  }
  std::stable_sort(out.begin(), out.end(), [](const GradientTensor& a, const GradientTensor& b) {
    return a.ready_fraction < b.ready_fraction;
  });
  return out;
}

std::vector<GradientBucket> make_buckets(const std::vector<GradientTensor>& gradients,
                                         double bucket_bytes) {
  std::vector<GradientBucket> buckets;
  GradientBucket open;
  for (const GradientTensor& g : gradients) {
    if (open.bytes > 0 && open.bytes + g.bytes > bucket_bytes) {
      buckets.push_back(open);
      open = {};
    }
    open.bytes += g.bytes;
    open.ready_fraction = std::max(open.ready_fraction, g.ready_fraction);
  }
  if (open.bytes > 0) buckets.push_back(open);
  return buckets;
}

ProjectedStep predict_step(const NodeWork& work, const std::vector<GradientBucket>& buckets,
                           double muon_matrix_bytes, int64_t muon_matrices, int nodes,
                           const RingLink& link, bool overlap) {
  if (nodes < 1) throw Error("internal: a step on fewer than one node");
  const double n = nodes;
  ProjectedStep p;
  p.nodes = nodes;
  const double fwd_bwd = (work.step_s - work.newton_schulz_s) / n;
  const double backward = fwd_bwd * work.backward_share;
  p.compute_s = fwd_bwd;

  // Time from the start of the backward; the link carries one bucket at a time.
  double link_free = 0;
  for (const GradientBucket& b : buckets) {
    const double ready = overlap ? b.ready_fraction * backward : backward;
    const double t = ring_allreduce_seconds(b.bytes, nodes, link);
    link_free = std::max(ready, link_free) + t;
    p.reduce_s += t;
    p.bytes_per_node += nodes > 1 ? 2 * (n - 1) / n * b.bytes : 0;
  }
  p.reduce_exposed_s = std::max(0.0, link_free - backward);

  if (muon_matrices > 0) {
    const int64_t groups = (muon_matrices + nodes - 1) / nodes;
    p.newton_schulz_s =
        work.newton_schulz_s * static_cast<double>(groups) / static_cast<double>(muon_matrices);
    p.allgather_s =
        static_cast<double>(groups) *
        ring_allgather_seconds(muon_matrix_bytes / static_cast<double>(groups), nodes, link);
    p.bytes_per_node += nodes > 1 ? (n - 1) / n * muon_matrix_bytes : 0;
    p.optimizer_s =
        overlap ? std::max(p.newton_schulz_s, p.allgather_s) +
                      std::min(p.newton_schulz_s, p.allgather_s) / static_cast<double>(groups)
                : p.newton_schulz_s + p.allgather_s;
  } else {
    p.newton_schulz_s = work.newton_schulz_s;
    p.optimizer_s = work.newton_schulz_s;
  }
  p.step_s = p.compute_s + p.reduce_exposed_s + p.optimizer_s;
  p.efficiency = p.step_s > 0 ? work.step_s / (n * p.step_s) : 0;
  return p;
}

ProjectedOuterStep predict_outer_step(const NodeWork& work, const OuterSyncPlan& plan, int nodes,
                                      const RingLink& link) {
  ProjectedOuterStep r;
  const double N = nodes;
  r.compute_s = (work.step_s - work.newton_schulz_s) / N + work.newton_schulz_s;
  if (nodes < 2 || plan.fragment_bytes.empty()) {
    r.step_s = r.compute_s;
    return r;
  }
  const double P = static_cast<double>(plan.fragment_bytes.size());
  double total = 0, largest = 0;
  for (double b : plan.fragment_bytes) {
    total += b;
    largest = std::max(largest, b);
  }
  auto transfer = [&](double bytes) {
    return (N - 1) * link.alpha_s + bytes / link.beta_bytes_per_s;
  };
  const double H = static_cast<double>(plan.sync_every);
  r.sync_s = transfer(largest);
  r.exposed_per_step_s =
      std::max(0.0, r.sync_s - static_cast<double>(plan.delay) * r.compute_s) / (H / P);
  r.step_s = r.compute_s + r.exposed_per_step_s;
  r.bytes_per_step = total / H;
  r.peak_bytes = largest;
  return r;
}

}  // namespace nanogpt
