#include "optim/gpt_optimizer.hpp"

#include <algorithm>
#include <numeric>

#include "model/qkv_shape.hpp"
#include "optim/adam.hpp"
#include "optim/muon.hpp"
#include "optim/schedule.hpp"
#include "runtime/profiler.hpp"

namespace nanogpt {

GptOptimizer::GptOptimizer(const ParameterSet& params, const Config& config, Precision precision)
    : config_(config), precision_(precision) {
  for (const ParamTensor& t : params.tensors()) {
    Slot s;
    s.param = &t;
    switch (t.group) {
      case ParamGroup::kMatrix:
        s.muon_buffer.assign(t.numel, 0.0f);
        s.base_lr = config.muon_lr;
        break;
      case ParamGroup::kEmbedding:
        s.base_lr = config.adam_embed_lr;
        break;
      case ParamGroup::kHead:
        s.base_lr = config.adam_head_lr;
        break;
      case ParamGroup::kScalar:
        s.base_lr = config.adam_scalar_lr;
        break;
      case ParamGroup::kRouter:
        // The smallest Adam rate: a router's logits are unscaled sums over model_dim, so its
        // steps move the routing of every token at once.
        s.base_lr = config.adam_scalar_lr;
        break;
    }
    if (t.group != ParamGroup::kMatrix) {
      s.exp_avg.assign(t.numel, 0.0f);
      s.exp_avg_sq.assign(t.numel, 0.0f);
    }
    slots_.push_back(std::move(s));
  }
  // A [3, R, C] weight (qkv_w) is three matrices, each orthogonalised on its own, as the seed's
  // batched Newton–Schulz does; so is an [E, R, C] stack of experts' matrices, one per expert.
  for (size_t i = 0; i < slots_.size(); ++i) {
    const ParamTensor& t = *slots_[i].param;
    if (t.group != ParamGroup::kMatrix) continue;
    const int64_t cols = t.shape.back();
    const int64_t rows = t.shape[t.shape.size() - 2];
    const int64_t count = static_cast<int64_t>(t.numel) / (rows * cols);
    for (int64_t m = 0; m < count; ++m) {
      muon_.push_back(
          {i, m * rows * cols, rows, cols, newton_schulz_flops(rows, cols, config.muon_ns_steps)});
    }
  }
  // Largest first, so the small ones fill in at the end and the threads finish together.
  // Stable: equal sizes keep parameter order (the order never changes results, only timing).
  std::stable_sort(muon_.begin(), muon_.end(),
                   [](const MuonMatrix& a, const MuonMatrix& b) { return a.work > b.work; });
  for (const MuonMatrix& m : muon_) muon_work_.push_back(m.work);
}

// Muon's matrices are independent and small (cpu preset: 256×256 to 1024×256): one GEMM call
// of theirs is too small to keep several threads busy, and each call pays a pool wake-up. So
// each matrix is one task on the pool, its whole update (momentum, Newton–Schulz, step) on one
// thread, largest first so the small ones fill in at the end. Measured on 2 threads (AVX-512),
// Newton–Schulz on two matrices at once, one per thread, against one after the other on the
// pool, per matrix: 256×256 2.2–3.7 vs 4.4–5.9 ms, 1024×256 6.3–8.4 vs 8.9–11.6 ms, 768×768
// 54–66 vs 63–70 ms, 768×3072 150 vs 164–184 ms. A task cannot be split, though: a matrix that
// alone costs more than its share of what is left, work > remaining / threads, finishes last
// whatever the others do, while the other threads idle (768×3072 alone: 300 ms as a task, 164–184
// ms on the pool). Such matrices run first, one at a time on the whole pool. In a GPT the largest
// matrix is about 30% of a layer's Newton–Schulz work, so on 2 or 3 threads every matrix is a task;
// the rule matters when the threads outnumber the matrices' work (few layers, many cores), where it
// falls back to the one-matrix-at-a-time order that ran before.
size_t muon_matrices_on_whole_pool(const std::vector<double>& work, int threads) {
  if (threads <= 1) return 0;
  double remaining = std::accumulate(work.begin(), work.end(), 0.0);
  size_t n = 0;
  while (n < work.size() && work[n] * threads > remaining) remaining -= work[n++];
  return n;
}

void GptOptimizer::muon_matrix(const MuonMatrix& m, ParameterSet& params,
                               std::span<const float> grads, double mult, double momentum,
                               NewtonSchulzWorkspace& ws) {
  Slot& s = slots_[m.slot];
  const ParamTensor& t = *s.param;
  const size_t off = t.offset + static_cast<size_t>(m.offset);
  // The element-wise part: momentum, Nesterov mix and the update, 8 FLOPs and 7 floats moved
  // per element. Newton–Schulz, inside, has its own scope.
  const double n = static_cast<double>(m.rows * m.cols);
  ProfileScope scope("muon", t.name, {m.rows, m.cols}, 8 * n, 28 * n);
  muon_update(params.values().data() + off, grads.data() + off, s.muon_buffer.data() + m.offset,
              m.rows, m.cols, s.base_lr * mult, momentum, static_cast<int>(config_.muon_ns_steps),
              ws);
}

void GptOptimizer::step(ParameterSet& params, std::span<const float> grads, int64_t step) {
  const double mult = lr_multiplier(step, config_.num_iterations, config_.cooldown_frac);
  MuonConfig muon;
  muon.momentum_start = config_.muon_momentum_start;
  muon.momentum_end = config_.muon_momentum_end;
  muon.momentum_warmup_steps = config_.muon_momentum_warmup;
  const double momentum = muon_momentum(step, muon);
  AdamConfig adam;
  adam.beta1 = config_.adam_beta1;
  adam.beta2 = config_.adam_beta2;
  adam.eps = config_.adam_eps;
  ++adam_steps_;
  ProfileScope scope("optimizer", "optimizer.step", {step}, 0, 0);
  for (Slot& s : slots_) {
    const ParamTensor& t = *s.param;
    if (t.group == ParamGroup::kMatrix) continue;
    // Moments, denominator and update: about 13 FLOPs; p, g, m, v read and p, m, v written.
    const double n = static_cast<double>(t.numel);
    ProfileScope adam_scope("adam", t.name, {static_cast<int64_t>(t.numel)}, 13 * n, 28 * n);
    adam_update(params.values().data() + t.offset, grads.data() + t.offset, s.exp_avg.data(),
                s.exp_avg_sq.data(), static_cast<int64_t>(t.numel), s.base_lr * mult, adam,
                adam_steps_);
  }

  ThreadPool& pool = ThreadPool::current();
  const int threads = pool.size();
  // One worker state per pool thread, kept across steps. Each workspace is sized up front for
  // every shape, so whichever matrices a worker draws, a step allocates nothing once warm.
  while (workers_.size() < static_cast<size_t>(threads)) {
    auto w = std::make_unique<MuonWorker>();
    w->ns.precision = precision_;
    for (const MuonMatrix& m : muon_) {
      w->ns.reserve(m.rows, m.cols);
      const auto numel = static_cast<size_t>(m.rows * m.cols);
      if (w->ns.staging.size() < numel) w->ns.staging.resize(numel);
    }
    workers_.push_back(std::move(w));
  }

  // Matrices that would straggle run first, on the whole pool; see muon_matrices_on_whole_pool.
  const size_t on_pool = muon_matrices_on_whole_pool(muon_work_, threads);
  {
    const Workspace::Use scratch(*workspace_);
    for (size_t i = 0; i < on_pool; ++i) {
      muon_matrix(muon_[i], params, grads, mult, momentum, workers_[0]->ns);
    }
  }
  // Then one task per matrix, handed out largest first. The worker index only picks scratch
  // space, so a matrix's bits do not depend on which worker runs it.
  const size_t tasks = muon_.size() - on_pool;
  ProfileScope batch_scope("optimizer", "muon.tasks", {static_cast<int64_t>(tasks), threads}, 0, 0);
  pool.parallel_for(tasks, [&](size_t task, int worker) {
    MuonWorker& w = *workers_[static_cast<size_t>(worker)];
    ThreadPool::Use serial(w.serial);
    // Each task's products run on this worker, so it installs the workspace for them itself
    // (a Use scope is per thread); the workspace keeps each thread's buffers apart.
    const Workspace::Use scratch(*workspace_);
    muon_matrix(muon_[on_pool + task], params, grads, mult, momentum, w.ns);
  });
}

size_t GptOptimizer::state_bytes() const {
  size_t floats = 0;
  for (const Slot& s : slots_) {
    floats += s.muon_buffer.capacity() + s.exp_avg.capacity() + s.exp_avg_sq.capacity();
  }
  return floats * sizeof(float);
}

size_t GptOptimizer::newton_schulz_bytes() const {
  size_t floats = 0;
  for (const auto& w : workers_) {
    const NewtonSchulzWorkspace& ns = w->ns;
    floats += ns.x.capacity() + ns.x_next.capacity() + ns.gram.capacity() + ns.poly.capacity() +
              ns.staging.capacity();
  }
  return floats * sizeof(float);
}

double muon_newton_schulz_flops(const Config& c) {
  const QkvShape qkv = qkv_shape(c);
  const int64_t d = c.model_dim, hd = qkv.q_width(), kv = qkv.kv_width(), s = c.muon_ns_steps;
  double f = 0;
  for (int64_t i = 0; i < c.num_layers; ++i) {
    if (c.has_attention(i)) {
      // q, k and v are orthogonalised one by one (qkv_w's thirds, or q_w, k_w, v_w).
      f += newton_schulz_flops(hd, d, s) + 2 * newton_schulz_flops(kv, d, s);
      f += newton_schulz_flops(d, hd, s);  // attn.c_proj
    }
    if (c.is_moe_layer(i)) {  // each expert's c_fc and c_proj (the router is Adam's)
      const int64_t h = c.moe_hidden();
      f += static_cast<double>(c.num_experts) *
           (newton_schulz_flops(h, d, s) + newton_schulz_flops(d, h, s));
      continue;
    }
    f += newton_schulz_flops(4 * d, d, s);  // mlp.c_fc
    f += newton_schulz_flops(d, 4 * d, s);  // mlp.c_proj
  }
  return f;
}

std::vector<GptOptimizer::StateTensor> GptOptimizer::state_tensors() {
  std::vector<StateTensor> out;
  for (Slot& s : slots_) {
    const ParamTensor& t = *s.param;
    if (t.group == ParamGroup::kMatrix) {
      out.push_back({"muon_buffer/" + t.name, t.shape, &s.muon_buffer});
    } else {
      out.push_back({"adam_exp_avg/" + t.name, t.shape, &s.exp_avg});
      out.push_back({"adam_exp_avg_sq/" + t.name, t.shape, &s.exp_avg_sq});
    }
  }
  return out;
}

}  // namespace nanogpt
