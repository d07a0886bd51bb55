#include "optim/gpt_optimizer.hpp"

#include <algorithm>
#include <numeric>

#include "model/qkv_shape.hpp"
#include "optim/adam.hpp"
#include "optim/muon.hpp"
#include "optim/schedule.hpp"
#include "runtime/profiler.hpp"

namespace nanogpt {

bool updated_by_muon(const ParamTensor& t, const Config& config) {
  return t.group == ParamGroup::kMatrix && config.matrix_optimizer == MatrixOptimizer::kMuon;
}

GptOptimizer::GptOptimizer(const ParameterSet& params, const Config& config, Precision precision,
                           Comm& comm, std::span<const int> ready_stages)
    : config_(config),
      comm_(&comm),
      rank_(comm.rank()),
      ranks_(comm.size()),
      precision_(precision) {
  for (const ParamTensor& t : params.tensors()) {
    Slot s;
    s.param = &t;
    switch (t.group) {
      case ParamGroup::kMatrix:
        s.base_lr = updated_by_muon(t, config) ? config.muon_lr : config.adam_matrix_lr;
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
    if (!updated_by_muon(t, config)) {
      s.adam_slice = even_slice(static_cast<int64_t>(t.numel), ranks_, rank_);
      s.exp_avg.assign(static_cast<size_t>(s.adam_slice.size()), 0.0f);
      s.exp_avg_sq.assign(static_cast<size_t>(s.adam_slice.size()), 0.0f);
    }
    slots_.push_back(std::move(s));
  }
  // A [3, R, C] weight (qkv_w) is three matrices, each orthogonalised on its own, as the seed's
  // batched Newton–Schulz does; so is an [E, R, C] stack of experts' matrices, one per expert.
  for (size_t i = 0; i < slots_.size(); ++i) {
    const ParamTensor& t = *slots_[i].param;
    if (!updated_by_muon(t, config)) continue;
    const int64_t cols = t.shape.back();
    const int64_t rows = t.shape[t.shape.size() - 2];
    const int64_t count = static_cast<int64_t>(t.numel) / (rows * cols);
    for (int64_t m = 0; m < count; ++m) {
      MuonMatrix mm;
      mm.slot = i;
      mm.offset = m * rows * cols;
      mm.rows = rows;
      mm.cols = cols;
      mm.work = newton_schulz_flops(rows, cols, config.muon_ns_steps);
      muon_.push_back(std::move(mm));
    }
  }
  // Largest first, so the small ones fill in at the end and the threads finish together.
  // Stable: equal sizes keep parameter order (the order never changes results, only timing).
  std::stable_sort(muon_.begin(), muon_.end(),
                   [](const MuonMatrix& a, const MuonMatrix& b) { return a.work > b.work; });
  for (const MuonMatrix& m : muon_) muon_work_.push_back(m.work);
  // The k-th largest matrix belongs to rank k mod N, so each rank's share of the work is even.
  for (size_t k = 0; k < muon_.size(); ++k) {
    MuonMatrix& m = muon_[k];
    m.owner = static_cast<int>(k % static_cast<size_t>(ranks_));
    if (m.owner == rank_) m.momentum.assign(static_cast<size_t>(m.rows * m.cols), 0.0f);
  }
  if (ranks_ > 1) plan_shards(ready_stages);
}

void GptOptimizer::plan_shards(std::span<const int> ready_stages) {
  if (ready_stages.size() != slots_.size()) {
    throw Error("internal: data-parallel training needs each parameter's backward stage");
  }
  // Every Adam tensor's N slices, then every Muon matrix (largest first), each with its owner.
  std::vector<ShardPiece> adam_pieces;
  for (size_t i = 0; i < slots_.size(); ++i) {
    const ParamTensor& t = *slots_[i].param;
    if (updated_by_muon(t, config_)) continue;
    for (int r = 0; r < ranks_; ++r) {
      const SliceRange sl = even_slice(static_cast<int64_t>(t.numel), ranks_, r);
      if (sl.size() == 0) continue;
      adam_pieces.push_back({t.offset + static_cast<size_t>(sl.begin),
                             static_cast<size_t>(sl.size()), r, static_cast<int>(i)});
    }
  }
  pieces_ = adam_pieces;
  for (const MuonMatrix& m : muon_) {
    const ParamTensor& t = *slots_[m.slot].param;
    pieces_.push_back({t.offset + static_cast<size_t>(m.offset),
                       static_cast<size_t>(m.rows * m.cols), m.owner, static_cast<int>(m.slot)});
  }
  reducer_ = std::make_unique<GradientReducer>(pieces_, ready_stages, config_.bucket_mb, *comm_);

  // The parameter gather: Adam's slices in one round, then the Muon matrices in rounds of
  // N·threads, where threads is the most any rank has (every rank must make the same calls).
  const auto per_rank = static_cast<size_t>(
      comm_->max(ThreadPool::current().size(), "the largest thread count of the ranks"));
  GatherRound adam;
  adam.pieces = std::move(adam_pieces);
  rounds_.push_back(std::move(adam));
  const size_t per_round = per_rank * static_cast<size_t>(ranks_);
  for (size_t first = 0; first < muon_.size(); first += per_round) {
    GatherRound round;
    for (size_t k = first; k < std::min(muon_.size(), first + per_round); ++k) {
      const MuonMatrix& m = muon_[k];
      round.pieces.push_back({slots_[m.slot].param->offset + static_cast<size_t>(m.offset),
                              static_cast<size_t>(m.rows * m.cols), m.owner,
                              static_cast<int>(m.slot)});
      if (m.owner == rank_) round.matrices.push_back(k);
    }
    rounds_.push_back(std::move(round));
  }
  const auto [all, send] = lay_out_groups(rounds_, ranks_, rank_);
  gather_all_.assign(all, 0.0f);
  gather_send_.assign(send, 0.0f);
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

void GptOptimizer::muon_matrix(MuonMatrix& m, ParameterSet& params, std::span<const float> grads,
                               double mult, double momentum, NewtonSchulzWorkspace& ws) {
  Slot& s = slots_[m.slot];
  const ParamTensor& t = *s.param;
  const size_t off = t.offset + static_cast<size_t>(m.offset);
  // The element-wise part: momentum, Nesterov mix and the update, 8 FLOPs and 7 floats moved
  // per element. Newton–Schulz, inside, has its own scope.
  const double n = static_cast<double>(m.rows * m.cols);
  ProfileScope scope("muon", t.name, {m.rows, m.cols}, 8 * n, 28 * n);
  muon_update(params.values().data() + off, grads.data() + off, m.momentum.data(), m.rows, m.cols,
              s.base_lr * mult, momentum, static_cast<int>(config_.muon_ns_steps), ws);
}

BackwardListener* GptOptimizer::begin_gradient_reduction(float* grads) {
  if (!reducer_) return nullptr;
  reducer_->begin(grads);
  reduction_begun_ = true;
  return reducer_.get();
}

void GptOptimizer::adam_slices(ParameterSet& params, std::span<const float> grads, double mult) {
  AdamConfig adam;
  adam.beta1 = config_.adam_beta1;
  adam.beta2 = config_.adam_beta2;
  adam.eps = config_.adam_eps;
  for (Slot& s : slots_) {
    const ParamTensor& t = *s.param;
    if (updated_by_muon(t, config_) || s.adam_slice.size() == 0) continue;
    // Moments, denominator and update: about 13 FLOPs; p, g, m, v read and p, m, v written.
    const auto n = s.adam_slice.size();
    const double nd = static_cast<double>(n);
    ProfileScope adam_scope("adam", t.name, {n}, 13 * nd, 28 * nd);
    const size_t off = t.offset + static_cast<size_t>(s.adam_slice.begin);
    adam_update(params.values().data() + off, grads.data() + off, s.exp_avg.data(),
                s.exp_avg_sq.data(), n, s.base_lr * mult, adam, adam_steps_);
  }
}

void GptOptimizer::ensure_workers(int threads) {
  // One worker state per pool thread, kept across steps. Each workspace is sized up front for
  // every shape, so whichever matrices a worker draws, a step allocates nothing once warm.
  while (workers_.size() < static_cast<size_t>(threads)) {
    auto w = std::make_unique<MuonWorker>();
    w->ns.precision = precision_;
    for (const MuonMatrix& m : muon_) {
      if (m.owner != rank_) continue;
      w->ns.reserve(m.rows, m.cols);
      const auto numel = static_cast<size_t>(m.rows * m.cols);
      if (w->ns.staging.size() < numel) w->ns.staging.resize(numel);
    }
    workers_.push_back(std::move(w));
  }
}

void GptOptimizer::step(ParameterSet& params, std::span<float> grads, int64_t step) {
  const double mult = lr_multiplier(step, config_.num_iterations, config_.cooldown_frac);
  MuonConfig muon;
  muon.momentum_start = config_.muon_momentum_start;
  muon.momentum_end = config_.muon_momentum_end;
  muon.momentum_warmup_steps = config_.muon_momentum_warmup;
  const double momentum = muon_momentum(step, muon);
  ++adam_steps_;
  ProfileScope scope("optimizer", "optimizer.step", {step}, 0, 0);
  if (ranks_ > 1) {
    step_sharded(params, grads, mult, momentum);
  } else {
    step_local(params, grads, mult, momentum);
  }
}

void GptOptimizer::step_local(ParameterSet& params, std::span<const float> grads, double mult,
                              double momentum) {
  adam_slices(params, grads, mult);
  ThreadPool& pool = ThreadPool::current();
  const int threads = pool.size();
  ensure_workers(threads);

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

Comm::OpId GptOptimizer::start_gather(GatherRound& round, const ParameterSet& params) {
  const auto mine = static_cast<size_t>(round.layout.counts[static_cast<size_t>(rank_)]);
  float* send = gather_send_.data() + round.mine_begin;
  round.layout.pack_part(round.pieces, params.values().data(), send, rank_);
  return comm_->start_allgather(
      std::span<const float>(send, mine),
      std::span<float>(gather_all_.data() + round.all_begin, round.layout.total),
      round.layout.counts, "parameter gather " + std::to_string(&round - rounds_.data()));
}

void GptOptimizer::step_sharded(ParameterSet& params, std::span<float> grads, double mult,
                                double momentum) {
  if (reduction_begun_) {
    reducer_->finish();
    reduction_begun_ = false;
  }
  std::vector<Comm::OpId> gathers;
  adam_slices(params, grads, mult);
  gathers.push_back(start_gather(rounds_[0], params));

  ThreadPool& pool = ThreadPool::current();
  ensure_workers(pool.size());
  for (size_t r = 1; r < rounds_.size(); ++r) {
    GatherRound& round = rounds_[r];
    // This rank's matrices of the round, one task each (at most one per thread of the rank
    // with the most threads), while the previous rounds' gathers proceed.
    ProfileScope batch_scope("optimizer", "muon.round",
                             {static_cast<int64_t>(round.matrices.size()), pool.size()}, 0, 0);
    pool.parallel_for(round.matrices.size(), [&](size_t task, int worker) {
      MuonWorker& w = *workers_[static_cast<size_t>(worker)];
      ThreadPool::Use serial(w.serial);
      const Workspace::Use scratch(*workspace_);
      muon_matrix(muon_[round.matrices[task]], params, grads, mult, momentum, w.ns);
    });
    gathers.push_back(start_gather(round, params));
    comm_->progress();
  }
  for (Comm::OpId id : gathers) comm_->wait(id);
  // Every rank's pieces into place (this rank's are there already and come back unchanged).
  for (GatherRound& round : rounds_) {
    round.layout.unpack(round.pieces, gather_all_.data() + round.all_begin, params.values().data());
  }
}

size_t GptOptimizer::state_bytes() const {
  size_t floats = 0;
  for (const Slot& s : slots_) floats += s.exp_avg.capacity() + s.exp_avg_sq.capacity();
  for (const MuonMatrix& m : muon_) floats += m.momentum.capacity();
  return floats * sizeof(float);
}

size_t GptOptimizer::communication_bytes() const {
  const size_t gather = (gather_all_.capacity() + gather_send_.capacity()) * sizeof(float);
  return gather + (reducer_ ? reducer_->buffer_bytes() : 0);
}

size_t GptOptimizer::newton_schulz_bytes() const {
  size_t bytes = 0;
  for (const auto& w : workers_) bytes += w->ns.bytes();
  return bytes;
}

double muon_newton_schulz_flops(const Config& c) {
  if (c.matrix_optimizer != MatrixOptimizer::kMuon) return 0;
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

std::vector<GptOptimizer::StateTensor> GptOptimizer::state_layout() const {
  std::vector<StateTensor> out;
  for (const Slot& s : slots_) {
    const ParamTensor& t = *s.param;
    if (updated_by_muon(t, config_)) {
      out.push_back({"muon_buffer/" + t.name, t.shape, {}});
    } else {
      out.push_back({"adam_exp_avg/" + t.name, t.shape, {}});
      out.push_back({"adam_exp_avg_sq/" + t.name, t.shape, {}});
    }
  }
  return out;
}

std::vector<GptOptimizer::StateTensor> GptOptimizer::export_state() {
  std::vector<StateTensor> out = state_layout();
  // Which tensor of `out` holds each slot's state.
  std::vector<size_t> first(slots_.size());
  for (size_t i = 0, k = 0; i < slots_.size(); ++i) {
    first[i] = k;
    k += updated_by_muon(*slots_[i].param, config_) ? 1 : 2;
  }
  for (size_t i = 0; i < slots_.size(); ++i) {
    const Slot& s = slots_[i];
    const ParamTensor& t = *s.param;
    StateTensor& a = out[first[i]];
    a.data.assign(t.numel, 0.0f);
    if (updated_by_muon(t, config_)) continue;  // filled from the matrices below
    StateTensor& b = out[first[i] + 1];
    b.data.assign(t.numel, 0.0f);
    // Each rank's slice, gathered in rank order: the slices tile the tensor in that order.
    std::vector<int> counts(static_cast<size_t>(ranks_));
    for (int r = 0; r < ranks_; ++r) {
      counts[static_cast<size_t>(r)] =
          static_cast<int>(even_slice(static_cast<int64_t>(t.numel), ranks_, r).size());
    }
    const Comm::OpId m = comm_->start_allgather(s.exp_avg, a.data, counts, "state " + a.name);
    const Comm::OpId v = comm_->start_allgather(s.exp_avg_sq, b.data, counts, "state " + b.name);
    comm_->wait(m);
    comm_->wait(v);
  }
  // Muon's momentum lives on each matrix's owner: broadcast it from there.
  for (MuonMatrix& m : muon_) {
    StateTensor& a = out[first[m.slot]];
    float* dst = a.data.data() + m.offset;
    const auto n = static_cast<size_t>(m.rows * m.cols);
    if (m.owner == rank_) std::copy(m.momentum.begin(), m.momentum.end(), dst);
    comm_->wait(comm_->start_broadcast(
        std::span<std::byte>(reinterpret_cast<std::byte*>(dst), n * sizeof(float)), m.owner,
        "state " + a.name));
  }
  return out;
}

void GptOptimizer::import_state(const std::vector<StateTensor>& state) {
  const std::vector<StateTensor> layout = state_layout();
  if (state.size() != layout.size()) throw Error("internal: optimizer state of the wrong size");
  for (size_t i = 0; i < layout.size(); ++i) {
    if (state[i].name != layout[i].name || state[i].data.size() != [&] {
          size_t n = 1;
          for (int64_t d : layout[i].shape) n *= static_cast<size_t>(d);
          return n;
        }()) {
      throw Error("internal: optimizer state tensor " + layout[i].name + " does not match");
    }
  }
  for (size_t i = 0, k = 0; i < slots_.size(); ++i) {
    Slot& s = slots_[i];
    if (updated_by_muon(*s.param, config_)) {
      for (MuonMatrix& m : muon_) {
        if (m.slot != i || m.owner != rank_) continue;
        const float* src = state[k].data.data() + m.offset;
        std::copy(src, src + m.momentum.size(), m.momentum.begin());
      }
      k += 1;
      continue;
    }
    const auto b = static_cast<size_t>(s.adam_slice.begin),
               e = static_cast<size_t>(s.adam_slice.end);
    std::copy(state[k].data.begin() + static_cast<std::ptrdiff_t>(b),
              state[k].data.begin() + static_cast<std::ptrdiff_t>(e), s.exp_avg.begin());
    std::copy(state[k + 1].data.begin() + static_cast<std::ptrdiff_t>(b),
              state[k + 1].data.begin() + static_cast<std::ptrdiff_t>(e), s.exp_avg_sq.begin());
    k += 2;
  }
}

}  // namespace nanogpt
