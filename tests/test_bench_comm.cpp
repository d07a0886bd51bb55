// The pure parts of `nanogpt bench comm` (train/comm_projection.hpp): the ring formulas, the
// latency/bandwidth fit on synthetic timings, the gradients' backward order and buckets, and a
// projected step worked out by hand.
#include <gtest/gtest.h>

#include <cmath>

#include "model/gpt.hpp"
#include "runtime/error.hpp"
#include "support/model.hpp"
#include "train/comm_projection.hpp"

namespace nanogpt {
namespace {

TEST(CommProjection, RingFormulasByHand) {
  const RingLink link{1e-5, 1e9};
  // N = 4, 1 MB: 2·3·10 us + 2·3/4·1e6/1e9 s = 60 us + 1.5 ms.
  EXPECT_NEAR(ring_allreduce_seconds(1e6, 4, link), 60e-6 + 1.5e-3, 1e-15);
  // All-gather of 1 MB in all: 3·10 us + 3/4 ms.
  EXPECT_NEAR(ring_allgather_seconds(1e6, 4, link), 30e-6 + 0.75e-3, 1e-15);
  EXPECT_EQ(ring_allreduce_seconds(1e6, 1, link), 0.0);
  EXPECT_EQ(ring_allgather_seconds(1e6, 1, link), 0.0);
}

std::vector<AllreduceSample> synthetic(const RingLink& link, int ranks, double noise) {
  std::vector<AllreduceSample> s;
  int k = 0;
  for (double n = 4096; n <= 256.0 * (1 << 20); n *= 4, ++k) {
    // A fixed pattern of relative errors of size `noise`, alternating in sign.
    const double e = noise * ((k % 2 == 0) ? 1 : -1) * (1 + 0.5 * (k % 3)) / 2;
    s.push_back({n, ring_allreduce_seconds(n, ranks, link) * (1 + e)});
  }
  return s;
}

TEST(CommProjection, FitRecoversExactParameters) {
  for (int ranks : {2, 3, 8}) {
    const RingLink truth{3e-6, 5e9};
    const AllreduceFit fit = fit_ring_allreduce(synthetic(truth, ranks, 0), ranks);
    EXPECT_NEAR(fit.link.alpha_s / truth.alpha_s, 1, 1e-9) << ranks;
    EXPECT_NEAR(fit.link.beta_bytes_per_s / truth.beta_bytes_per_s, 1, 1e-9) << ranks;
    EXPECT_LT(fit.max_relative_error, 1e-9);
  }
}

TEST(CommProjection, FitToleratesNoise) {
  // Errors of up to ±2% in every time move the fitted latency and bandwidth by a few percent
  // at most (the 4 KiB and 256 MiB points pin each nearly alone).
  const RingLink truth{20e-6, 1.2e9};
  const AllreduceFit fit = fit_ring_allreduce(synthetic(truth, 2, 0.02), 2);
  EXPECT_NEAR(fit.link.alpha_s / truth.alpha_s, 1, 0.05);
  EXPECT_NEAR(fit.link.beta_bytes_per_s / truth.beta_bytes_per_s, 1, 0.05);
  EXPECT_GT(fit.max_relative_error, 0.001);
  EXPECT_LT(fit.max_relative_error, 0.05);
}

TEST(CommProjection, FitWithoutLatencyGoesThroughTheOrigin) {
  // Pure bandwidth, a little faster per byte for small messages: the free line would cross
  // below zero; the fit keeps alpha = 0 and the slope through the origin.
  std::vector<AllreduceSample> s = {{1e3, 0.9e-6}, {1e6, 1e-3}, {1e8, 0.1}};
  const AllreduceFit fit = fit_ring_allreduce(s, 2);
  EXPECT_EQ(fit.link.alpha_s, 0.0);
  EXPECT_NEAR(fit.link.beta_bytes_per_s, 1e9, 0.05e9);
}

TEST(CommProjection, FitRejectsTooFewSizes) {
  EXPECT_THROW(fit_ring_allreduce({{4096, 1e-5}, {4096, 2e-5}}, 2), Error);
  EXPECT_THROW(fit_ring_allreduce({{4096, 1e-5}, {8192, 2e-5}}, 1), Error);
  EXPECT_THROW(fit_ring_allreduce({{4096, 1e-5}, {8192, 0}}, 2), Error);
}

TEST(CommProjection, GradientsInBackwardOrder) {
  const Config c = micro_config();  // 6 layers, layer 3 without attention
  const Gpt model(c);
  const double h = 0.25;
  const std::vector<GradientTensor> g = gradients_in_backward_order(model.params().tensors(), c, h);
  ASSERT_EQ(g.size(), model.params().tensors().size());
  double bytes = 0;
  int64_t matrices = 0;
  for (size_t i = 0; i < g.size(); ++i) {
    bytes += g[i].bytes;
    matrices += g[i].muon_matrices;
    if (i > 0) {
      EXPECT_GE(g[i].ready_fraction, g[i - 1].ready_fraction) << g[i].name;
    }
  }
  EXPECT_EQ(bytes, 4.0 * static_cast<double>(model.params().size()));
  // Muon: q, k, v and c_proj in the 5 attention layers, c_fc and c_proj in all 6.
  EXPECT_EQ(matrices, 5 * 4 + 6 * 2);
  EXPECT_EQ(g.front().name, "lm_head.weight");
  EXPECT_EQ(g.front().ready_fraction, h);
  auto ready = [&](const std::string& name) {
    for (const GradientTensor& t : g) {
      if (t.name == name) return t.ready_fraction;
    }
    ADD_FAILURE() << name;
    return -1.0;
  };
  // Block i ends at h + (6 - i)·(1 - h)/6.
  EXPECT_DOUBLE_EQ(ready("blocks.5.mlp.c_fc.weight"), h + 1 * 0.75 / 6);
  EXPECT_DOUBLE_EQ(ready("blocks.0.attn.qkv_w"), 1.0);
  EXPECT_DOUBLE_EQ(ready("blocks.2.lambdas"), h + 4 * 0.75 / 6);
  // Value embedding k feeds blocks k and 3 + k: final when block k is done.
  EXPECT_DOUBLE_EQ(ready("value_embeds.1.weight"), h + 5 * 0.75 / 6);
  EXPECT_DOUBLE_EQ(ready("embed.weight"), 1.0);
  EXPECT_DOUBLE_EQ(ready("skip_weights"), 1.0);
}

TEST(CommProjection, BucketsCloseBeforeOverflowing) {
  const std::vector<GradientTensor> g = {
      {"a", 10, 0.1, 0}, {"b", 10, 0.2, 0}, {"c", 30, 0.3, 0}, {"d", 5, 0.9, 0}, {"e", 5, 1, 0}};
  const std::vector<GradientBucket> b = make_buckets(g, 25);
  ASSERT_EQ(b.size(), 3u);
  EXPECT_EQ(b[0].bytes, 20);
  EXPECT_EQ(b[0].ready_fraction, 0.2);
  EXPECT_EQ(b[1].bytes, 30);  // larger than a bucket: alone
  EXPECT_EQ(b[2].bytes, 10);
  EXPECT_EQ(b[2].ready_fraction, 1);
}

TEST(CommProjection, StepByHand) {
  // S = 10 s on one node, 1 s of it Newton–Schulz; the backward 2/3 of forward + backward.
  NodeWork w;
  w.step_s = 10;
  w.newton_schulz_s = 1;
  w.backward_share = 2.0 / 3.0;
  // Two 1 GB buckets, final at half and at the end of the backward; 4 Muon matrices, 2 GB.
  const std::vector<GradientBucket> buckets = {{1e9, 0.5}, {1e9, 1.0}};
  const RingLink link{0, 1e9};
  // N = 2: compute 9/2 = 4.5 s, backward 3 s from 1.5 s. A 1 GB all-reduce: 2·1/2·1 s = 1 s.
  const ProjectedStep on = predict_step(w, buckets, 2e9, 4, 2, link, true);
  // Overlap: bucket 1 runs over backward time 1.5..2.5 s, bucket 2 3..4 s: 1 s after the end.
  // Muon: 2 groups; Newton–Schulz 1·2/4 = 0.5 s; gathers 2 × 1/2·1 GB / 1 GB/s = 1 s;
  // overlapped: max(0.5, 1) + 0.5/2 = 1.25 s. Step 4.5 + 1 + 1.25 = 6.75 s.
  EXPECT_DOUBLE_EQ(on.compute_s, 4.5);
  EXPECT_DOUBLE_EQ(on.reduce_s, 2);
  EXPECT_DOUBLE_EQ(on.reduce_exposed_s, 1);
  EXPECT_DOUBLE_EQ(on.newton_schulz_s, 0.5);
  EXPECT_DOUBLE_EQ(on.allgather_s, 1);
  EXPECT_DOUBLE_EQ(on.optimizer_s, 1.25);
  EXPECT_DOUBLE_EQ(on.step_s, 6.75);
  EXPECT_DOUBLE_EQ(on.efficiency, 10 / (2 * 6.75));
  // Sent per node: (2·1/2)·2 GB of gradients + 1/2·2 GB of matrices.
  EXPECT_DOUBLE_EQ(on.bytes_per_node, 3e9);
  // Without overlap both buckets follow the backward (2 s exposed) and the optimizer is
  // 0.5 + 1 s: 4.5 + 2 + 1.5 = 8 s.
  const ProjectedStep off = predict_step(w, buckets, 2e9, 4, 2, link, false);
  EXPECT_DOUBLE_EQ(off.reduce_exposed_s, 2);
  EXPECT_DOUBLE_EQ(off.optimizer_s, 1.5);
  EXPECT_DOUBLE_EQ(off.step_s, 8);
  EXPECT_DOUBLE_EQ(off.efficiency, 10.0 / 16);
  // One node: no communication, the step is S.
  const ProjectedStep one = predict_step(w, buckets, 2e9, 4, 1, RingLink{1e-3, 1e6}, true);
  EXPECT_DOUBLE_EQ(one.step_s, 10);
  EXPECT_DOUBLE_EQ(one.efficiency, 1);
  EXPECT_EQ(one.bytes_per_node, 0);
  // Latency: each bucket's all-reduce gains 2(N-1)·alpha = 20 ms at N = 2, alpha = 10 ms.
  const ProjectedStep slow = predict_step(w, buckets, 2e9, 4, 2, RingLink{0.01, 1e9}, false);
  EXPECT_NEAR(slow.reduce_s, 2.04, 1e-12);
}

}  // namespace
}  // namespace nanogpt

namespace nanogpt {
namespace {

// Hand-worked: S = 10 s with S_ns = 1 s on 2 nodes: compute 9/2 + 1 = 5.5 s. Link: 1 ms per hop,
// 100 MB/s. DiLoCo, one 200 MB fragment every 20 steps: sync 0.001 + 2 = 2.001 s, waited for:
// 5.5 + 2.001/20. Streaming, fragments of 60 and 40 MB, H = 20, τ = 1: the larger takes 0.601 s,
// hidden behind 5.5 s of compute: 5.5 s a step; with a 1 MB/s link it takes 60.001 s, of which
// 54.501 s are exposed once per H/P = 10 steps.
TEST(CommProjection, OuterStepHandWorked) {
  NodeWork work;
  work.step_s = 10;
  work.newton_schulz_s = 1;
  const RingLink link{1e-3, 100e6};
  OuterSyncPlan diloco;
  diloco.sync_every = 20;
  diloco.fragment_bytes = {200e6};
  const ProjectedOuterStep d = predict_outer_step(work, diloco, 2, link);
  EXPECT_DOUBLE_EQ(d.compute_s, 5.5);
  EXPECT_NEAR(d.sync_s, 2.001, 1e-12);
  EXPECT_NEAR(d.step_s, 5.5 + 2.001 / 20, 1e-12);
  EXPECT_DOUBLE_EQ(d.bytes_per_step, 10e6);
  EXPECT_DOUBLE_EQ(d.peak_bytes, 200e6);
  OuterSyncPlan streaming;
  streaming.sync_every = 20;
  streaming.delay = 1;
  streaming.fragment_bytes = {60e6, 40e6};
  const ProjectedOuterStep s = predict_outer_step(work, streaming, 2, link);
  EXPECT_NEAR(s.sync_s, 0.601, 1e-12);
  EXPECT_DOUBLE_EQ(s.step_s, 5.5);
  const ProjectedOuterStep slow = predict_outer_step(work, streaming, 2, {1e-3, 1e6});
  EXPECT_NEAR(slow.step_s, 5.5 + (60.001 - 5.5) / 10, 1e-9);
  EXPECT_DOUBLE_EQ(predict_outer_step(work, streaming, 1, link).step_s, 10.0);
}

}  // namespace
}  // namespace nanogpt
