// What data-parallel training would cost beyond this machine: the all-reduce time of a message
// fitted to the ring model, and a step of a model on N nodes predicted from it
// (`nanogpt bench comm`, bench/README.md "Scaling out"). Pure functions, so the fit and the
// prediction are tested on hand-worked cases.
//
// Ring collectives over N ranks, n bytes, per-hop latency alpha (s), link bandwidth beta
// (bytes/s), each rank sending to the next one:
//   all-reduce  t = 2(N-1)·alpha + 2(N-1)/N · n/beta   (reduce-scatter, then all-gather)
//   all-gather  t =  (N-1)·alpha +  (N-1)/N · n/beta   (n: the gathered total)
//
// A step on N nodes (predict_step), under strong scaling (the global batch fixed, each node
// computing 1/N of it):
//   compute     the forward and backward of one node's share, (S - S_ns)/N, where S is one
//               node's time for the whole global batch and S_ns its Newton–Schulz part; split
//               into forward and backward by their FLOP shares.
//   gradients   all-reduced in buckets of bucket_bytes, formed in the order the backward makes
//               gradients final (first lm_head, then the blocks from last to first, the token
//               embedding last); a tensor larger than a bucket is a bucket alone. The buckets
//               go over the link one after another. With overlap a bucket starts as soon as
//               its last gradient is final (the backward time is spread evenly over the
//               blocks, the head taking its FLOP share); without, all start after the
//               backward. Adam's ZeRO-1 reduce-scatter + all-gather moves the same bytes as an
//               all-reduce, so every gradient is counted as all-reduced.
//   optimizer   distributed Muon: each node orthogonalises ceil(M/N) of the M matrices
//               (time S_ns·ceil(M/N)/M, the matrices taken as equally costly), then the
//               updated matrices are all-gathered in ceil(M/N) groups of N. Without overlap
//               the gathers follow Newton–Schulz; with overlap (the seed's pipeline: group g's
//               gather runs during group g+1's Newton–Schulz) the two overlap, and the longer
//               of the two plus one group of the shorter is what remains.
//   step        compute + exposed gradient reduction + optimizer; efficiency = S / (N · step).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "config/config.hpp"
#include "model/parameters.hpp"

namespace nanogpt {

struct RingLink {
  double alpha_s = 0;           // per-hop latency
  double beta_bytes_per_s = 0;  // bandwidth of one link
};

double ring_allreduce_seconds(double bytes, int ranks, const RingLink& link);
double ring_allgather_seconds(double bytes, int ranks, const RingLink& link);

// One timed message size: the all-reduce of `bytes` took `seconds`.
struct AllreduceSample {
  double bytes = 0, seconds = 0;
};

struct AllreduceFit {
  RingLink link;
  double max_relative_error = 0;  // of the fitted time against the samples
};

// Least squares of t = c0 + c1·n on the samples, weighted by 1/t² (the relative error is
// minimised, so 4 KiB and 256 MiB count alike), with c0 >= 0 (refitted through the origin
// if the free fit is negative); then alpha = c0 / (2(N-1)), beta = 2(N-1)/N / c1. Throws Error
// with fewer than two distinct sizes or ranks < 2.
AllreduceFit fit_ring_allreduce(const std::vector<AllreduceSample>& samples, int ranks);

// A gradient as the backward produces it: its bytes, when it is final as a fraction of the
// backward (0: at its start, 1: at its end), and how many Muon matrices it holds (0 for Adam's).
struct GradientTensor {
  std::string name;
  double bytes = 0;
  double ready_fraction = 0;
  int64_t muon_matrices = 0;
};

// The model's gradients in the order the backward makes them final (see the top of this
// file): lm_head after its share `head_backward_share` of the backward, block i's tensors
// (and the value embedding it mixes in first, when i is the lower of the two blocks using it)
// when block i's backward ends, the blocks sharing the rest evenly; the token embedding and the
// skip weights at the end. Float32 gradients (4 bytes per parameter).
std::vector<GradientTensor> gradients_in_backward_order(const std::vector<ParamTensor>& tensors,
                                                        const Config& config,
                                                        double head_backward_share);

// A bucket of gradients reduced together.
struct GradientBucket {
  double bytes = 0;
  double ready_fraction = 0;  // of its last gradient
};

// The seed's bucketing: gradients in backward order, a bucket closed when the next gradient
// would take it past bucket_bytes (so a larger gradient is a bucket alone).
std::vector<GradientBucket> make_buckets(const std::vector<GradientTensor>& gradients,
                                         double bucket_bytes);

// One node's work for one step of the whole global batch, in seconds, and its split.
struct NodeWork {
  double step_s = 0;                  // S: forward, backward and optimizer of the global batch
  double newton_schulz_s = 0;         // S_ns, part of step_s
  double backward_share = 2.0 / 3.0;  // of the forward + backward time
};

struct ProjectedStep {
  int nodes = 1;
  double compute_s = 0;         // forward + backward of one node's share
  double reduce_s = 0;          // all gradient buckets' all-reduce time, back to back
  double reduce_exposed_s = 0;  // the part of it after the backward ended
  double newton_schulz_s = 0;   // one node's share
  double allgather_s = 0;       // Muon's all-gathers
  double optimizer_s = 0;       // Newton–Schulz and the all-gathers as they combine
  double step_s = 0;
  double efficiency = 0;      // S / (N · step_s)
  double bytes_per_node = 0;  // sent by one node per step (ring: (N-1)/N of each message,
                              // twice for an all-reduce)
};

ProjectedStep predict_step(const NodeWork& work, const std::vector<GradientBucket>& buckets,
                           double muon_matrix_bytes, int64_t muon_matrices, int nodes,
                           const RingLink& link, bool overlap);

// DiLoCo and Streaming DiLoCo across `nodes` replicas (one node each): every node computes the
// forward and backward of its share, (S − S_ns)/N, and the WHOLE optimizer, S_ns (its replica
// orthogonalises every matrix); every H steps each fragment's encoded outer gradient is
// all-gathered across the replicas, (N − 1)·α + (N − 1)·bytes/β. DiLoCo (one fragment, τ = 0)
// waits for it: step = compute + t(model)/H. Streaming: fragment transfers overlap τ inner
// steps, and one leaves every H/P steps, so step = compute + max(0, t(fragment) − τ·compute)
// / (H/P), with the largest fragment's t.
struct OuterSyncPlan {
  int64_t sync_every = 100;            // H
  int64_t delay = 0;                   // τ
  std::vector<double> fragment_bytes;  // encoded bytes one node sends per fragment sync, each
                                       // as (N − 1)·(its share's encoding)
};

struct ProjectedOuterStep {
  double compute_s = 0;
  double sync_s = 0;  // the largest fragment's all-gather
  double exposed_per_step_s = 0;
  double step_s = 0;
  double bytes_per_step = 0;  // sent by one node, averaged over H steps
  double peak_bytes = 0;      // sent by one node at a sync step
};

ProjectedOuterStep predict_outer_step(const NodeWork& work, const OuterSyncPlan& plan, int nodes,
                                      const RingLink& link);

}  // namespace nanogpt
