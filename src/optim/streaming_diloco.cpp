#include "optim/streaming_diloco.hpp"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "optim/elementwise.hpp"
#include "optim/outer_grad_codec.hpp"
#include "runtime/error.hpp"
#include "runtime/profiler.hpp"

namespace nanogpt {

namespace {

std::string fragment_name(size_t p) {
  return "fragment " + std::to_string(p);
}

}  // namespace

StreamingDiloco::StreamingDiloco(const ParameterSet& params, const Config& config, Comm& replica,
                                 Comm& across)
    : config_(config),
      replica_(replica),
      across_(across),
      bits_(config.outer_bits()),
      delay_(config.outer_sync_delay()),
      alpha_(config.outer_merge_alpha()) {
  plan_ = plan_fragments(params.tensors(), config.num_layers, config.outer_fragments(),
                         config.fragment_order);
  shares_.resize(plan_.size());
  const int G = replica_.size();
  for (size_t p = 0; p < plan_.size(); ++p) {
    const OuterFragment& f = plan_[p];
    Share& s = shares_[p];
    const SliceRange mine = even_slice(static_cast<int64_t>(f.numel), G, replica_.rank());
    for (int r = 0; r < G; ++r) {
      s.gather_counts.push_back(
          static_cast<int>(even_slice(static_cast<int64_t>(f.numel), G, r).size()));
    }
    s.begin = static_cast<size_t>(mine.begin);
    s.count = static_cast<size_t>(mine.size());
    // The share's runs: the fragment's runs cut to [mine.begin, mine.end) of its concatenation.
    size_t at = 0;
    for (const ParamRun& run : f.runs) {
      const size_t lo = std::max(at, s.begin), hi = std::min(at + run.count, s.begin + s.count);
      if (lo < hi) s.runs.push_back({run.offset + (lo - at), hi - lo});
      at += run.count;
    }
    s.global.resize(s.count);
    pack(s, params.values().data(), s.global.data());
    s.momentum.assign(s.count, 0.0f);
    s.send.resize(outer_grad_encoded_bytes(s.count, bits_));
    s.recv.resize(s.send.size() * static_cast<size_t>(across_.size()));
  }
}

void StreamingDiloco::pack(const Share& s, const float* params, float* out) const {
  for (const ParamRun& run : s.runs) {
    std::copy(params + run.offset, params + run.offset + run.count, out);
    out += run.count;
  }
}

void StreamingDiloco::start(size_t p, const ParameterSet& params, int64_t steps_done) {
  Share& s = shares_[p];
  ProfileScope scope("outer_step", "outer.start " + fragment_name(p),
                     {static_cast<int64_t>(s.count), bits_}, static_cast<double>(s.count),
                     static_cast<double>(s.send.size()));
  scratch_.resize(s.count);
  pack(s, params.values().data(), scratch_.data());
  for_each_chunk(static_cast<int64_t>(s.count), [&](int64_t, int64_t b, int64_t e) {
    for (auto i = static_cast<size_t>(b); i < static_cast<size_t>(e); ++i) {
      scratch_[i] = s.global[i] - scratch_[i];
    }
  });
  encode_outer_grad(scratch_, bits_, s.send, fragment_name(p).c_str());
  std::vector<int> counts(static_cast<size_t>(across_.size()), static_cast<int>(s.send.size()));
  s.op = across_.start_allgather_bytes(s.send, s.recv, std::move(counts),
                                       "outer gradient of " + fragment_name(p));
  s.in_flight = true;
  s.completed = false;
  s.started_at = s.last_start = steps_done;
  s.merge_at = steps_done + delay_;
}

void StreamingDiloco::complete(size_t p) {
  Share& s = shares_[p];
  if (!s.in_flight || s.completed) return;
  across_.wait(s.op);
  s.op = 0;
  ProfileScope scope("outer_step", "outer.step " + fragment_name(p),
                     {static_cast<int64_t>(s.count), across_.size()},
                     6.0 * static_cast<double>(s.count), 0);
  scratch_.assign(s.count, 0.0f);
  const size_t bytes = s.send.size();
  for (int r = 0; r < across_.size(); ++r) {
    decode_add_outer_grad(
        std::span<const uint8_t>(s.recv).subspan(static_cast<size_t>(r) * bytes, bytes), bits_,
        scratch_);
  }
  const auto M = static_cast<float>(across_.size());
  const auto lr = static_cast<float>(config_.outer_lr);
  const auto mu = static_cast<float>(config_.outer_momentum);
  if (s.averaging) {
    // The end of training: θ_global becomes the replicas' mean, θ_global − mean(Δ).
    for_each_chunk(static_cast<int64_t>(s.count), [&](int64_t, int64_t b, int64_t e) {
      for (auto i = static_cast<size_t>(b); i < static_cast<size_t>(e); ++i) {
        s.global[i] -= scratch_[i] / M;
      }
    });
  } else {
    for_each_chunk(static_cast<int64_t>(s.count), [&](int64_t, int64_t b, int64_t e) {
      for (auto i = static_cast<size_t>(b); i < static_cast<size_t>(e); ++i) {
        const float delta = scratch_[i] / M;
        s.momentum[i] = mu * s.momentum[i] + delta;
        s.global[i] -= lr * (delta + mu * s.momentum[i]);
      }
    });
  }
  s.completed = true;
}

void StreamingDiloco::merge(size_t p, ParameterSet& params, double alpha) {
  Share& s = shares_[p];
  complete(p);
  ProfileScope scope("outer_step", "outer.merge " + fragment_name(p),
                     {static_cast<int64_t>(s.count)}, 3.0 * static_cast<double>(s.count), 0);
  float* values = params.values().data();
  scratch_.resize(s.count);
  if (alpha == 0) {
    std::copy(s.global.begin(), s.global.end(), scratch_.begin());
  } else {
    pack(s, values, scratch_.data());
    const auto a = static_cast<float>(alpha);
    for_each_chunk(static_cast<int64_t>(s.count), [&](int64_t, int64_t b, int64_t e) {
      for (auto i = static_cast<size_t>(b); i < static_cast<size_t>(e); ++i) {
        scratch_[i] = a * scratch_[i] + (1.0f - a) * s.global[i];
      }
    });
  }
  const OuterFragment& f = plan_[p];
  const float* whole = scratch_.data();
  std::vector<ParamRun> runs = s.runs;
  if (replica_.size() > 1) {
    gathered_.resize(f.numel);
    replica_.wait(replica_.start_allgather(scratch_, gathered_, s.gather_counts,
                                           "merged " + fragment_name(p)));
    whole = gathered_.data();
    runs = f.runs;
  }
  for (const ParamRun& run : runs) {
    std::copy(whole, whole + run.count, values + run.offset);
    whole += run.count;
  }
  s.in_flight = false;
  s.completed = false;
  s.averaging = false;
}

std::vector<int> StreamingDiloco::after_inner_step(ParameterSet& params, int64_t steps_done) {
  for (size_t p = 0; p < shares_.size(); ++p) {
    if (shares_[p].in_flight && shares_[p].merge_at == steps_done) merge(p, params, alpha_);
  }
  std::vector<int> started;
  const auto P = static_cast<int64_t>(plan_.size());
  for (size_t p = 0; p < shares_.size(); ++p) {
    if (!fragment_syncs_after(steps_done, static_cast<int64_t>(p), P, config_.sync_every)) continue;
    start(p, params, steps_done);
    started.push_back(static_cast<int>(p));
    if (delay_ == 0) merge(p, params, alpha_);
  }
  across_.progress();
  return started;
}

void StreamingDiloco::finish(ParameterSet& params, int64_t steps_done) {
  for (size_t p = 0; p < shares_.size(); ++p) {
    if (shares_[p].in_flight) merge(p, params, alpha_);
  }
  for (size_t p = 0; p < shares_.size(); ++p) {
    if (shares_[p].last_start < steps_done) {
      start(p, params, steps_done);
      shares_[p].averaging = true;
    }
  }
  for (size_t p = 0; p < shares_.size(); ++p) merge(p, params, 0.0);
}

void StreamingDiloco::settle() {
  for (size_t p = 0; p < shares_.size(); ++p) complete(p);
}

std::vector<StreamingDiloco::StateTensor> StreamingDiloco::state_layout(
    const ParameterSet& params) const {
  std::vector<StateTensor> out;
  for (const char* kind : {"global", "momentum"}) {
    for (const ParamTensor& t : params.tensors()) {
      out.push_back({std::string("outer/") + kind + "/" + t.name, t.shape, {}});
    }
  }
  return out;
}

std::vector<StreamingDiloco::StateTensor> StreamingDiloco::export_state(
    const ParameterSet& params) {
  settle();
  std::vector<float> full[2];
  for (auto& v : full) v.assign(params.size(), 0.0f);
  for (size_t p = 0; p < shares_.size(); ++p) {
    const Share& s = shares_[p];
    const OuterFragment& f = plan_[p];
    for (int k = 0; k < 2; ++k) {
      const std::vector<float>& mine = k == 0 ? s.global : s.momentum;
      gathered_.resize(f.numel);
      replica_.wait(replica_.start_allgather(mine, gathered_, s.gather_counts,
                                             "outer state of " + fragment_name(p)));
      const float* g = gathered_.data();
      for (const ParamRun& run : f.runs) {
        std::copy(g, g + run.count, full[k].data() + run.offset);
        g += run.count;
      }
    }
  }
  std::vector<StateTensor> out = state_layout(params);
  const size_t n = params.tensors().size();
  for (size_t i = 0; i < out.size(); ++i) {
    const ParamTensor& t = params.tensors()[i % n];
    const std::vector<float>& src = full[i / n];
    out[i].data.assign(src.begin() + static_cast<std::ptrdiff_t>(t.offset),
                       src.begin() + static_cast<std::ptrdiff_t>(t.offset + t.numel));
  }
  return out;
}

void StreamingDiloco::import_state(const std::vector<StateTensor>& state) {
  // state is state_layout's order: every tensor's global, then every tensor's momentum.
  size_t total = 0;
  for (const OuterFragment& f : plan_) total += f.numel;
  std::vector<float> full[2];
  for (auto& v : full) v.assign(total, 0.0f);
  if (state.size() % 2 != 0) throw Error("internal: StreamingDiloco::import_state: bad layout");
  const size_t n = state.size() / 2;
  size_t offset = 0;
  for (size_t i = 0; i < n; ++i) {
    for (int k = 0; k < 2; ++k) {
      const auto& d = state[static_cast<size_t>(k) * n + i].data;
      std::copy(d.begin(), d.end(), full[k].begin() + static_cast<std::ptrdiff_t>(offset));
    }
    offset += state[i].data.size();
  }
  for (Share& s : shares_) {
    pack(s, full[0].data(), s.global.data());
    pack(s, full[1].data(), s.momentum.data());
  }
}

std::string StreamingDiloco::schedule_json() const {
  nlohmann::json j;
  j["replicas"] = across_.size();
  j["ranks_per_replica"] = replica_.size();
  j["fragments"] = nlohmann::json::array();
  for (const Share& s : shares_) {
    j["fragments"].push_back({{"in_flight", s.in_flight},
                              {"completed", s.completed},
                              {"started_at", s.started_at},
                              {"merge_at", s.merge_at},
                              {"last_start", s.last_start}});
  }
  return j.dump();
}

void StreamingDiloco::set_schedule_json(const std::string& text) {
  const nlohmann::json j = nlohmann::json::parse(text);
  if (j.at("replicas").get<int>() != across_.size() ||
      j.at("ranks_per_replica").get<int>() != replica_.size() ||
      j.at("fragments").size() != shares_.size()) {
    throw InputError("--resume: the checkpoint was written by " +
                     std::to_string(j.at("replicas").get<int>()) + " replicas of " +
                     std::to_string(j.at("ranks_per_replica").get<int>()) +
                     " ranks; this run has " + std::to_string(across_.size()) + " of " +
                     std::to_string(replica_.size()) +
                     ". A DiLoCo run resumes on the same layout (its replicas differ)");
  }
  for (size_t p = 0; p < shares_.size(); ++p) {
    const nlohmann::json& f = j.at("fragments")[p];
    Share& s = shares_[p];
    s.in_flight = f.at("in_flight").get<bool>();
    s.completed = f.at("completed").get<bool>();
    s.started_at = f.at("started_at").get<int64_t>();
    s.merge_at = f.at("merge_at").get<int64_t>();
    s.last_start = f.at("last_start").get<int64_t>();
    if (s.in_flight && !s.completed) {
      throw InputError(
          "--resume: the checkpoint has an outer step still on the wire; it was not "
          "written by this version of nanogpt");
    }
  }
}

double StreamingDiloco::sync_bytes(size_t p) const {
  return static_cast<double>(shares_[p].send.size()) * (across_.size() - 1);
}

size_t StreamingDiloco::state_bytes() const {
  size_t b = 0;
  for (const Share& s : shares_) b += (s.global.capacity() + s.momentum.capacity()) * sizeof(float);
  return b;
}

size_t StreamingDiloco::buffer_bytes() const {
  size_t b = (scratch_.capacity() + gathered_.capacity()) * sizeof(float);
  for (const Share& s : shares_) b += s.send.capacity() + s.recv.capacity();
  return b;
}

}  // namespace nanogpt
