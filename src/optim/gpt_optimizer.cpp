#include "optim/gpt_optimizer.hpp"

#include "optim/adam.hpp"
#include "optim/muon.hpp"
#include "optim/schedule.hpp"
#include "runtime/profiler.hpp"

namespace nanogpt {

GptOptimizer::GptOptimizer(const ParameterSet& params, const Config& config) : config_(config) {
  ns_.precision = resolved_precision(config);  // the seed runs Newton–Schulz in bf16
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
    }
    if (t.group != ParamGroup::kMatrix) {
      s.exp_avg.assign(t.numel, 0.0f);
      s.exp_avg_sq.assign(t.numel, 0.0f);
    }
    slots_.push_back(std::move(s));
  }
}

void GptOptimizer::step(ParameterSet& params, const std::vector<float>& grads, int64_t step) {
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
    float* p = params.values().data() + t.offset;
    const float* g = grads.data() + t.offset;
    const double lr = s.base_lr * mult;
    if (t.group == ParamGroup::kMatrix) {
      // A [3, R, C] weight (qkv_w) is three matrices, each orthogonalised on its own, as the
      // seed's batched Newton–Schulz does.
      const int64_t cols = t.shape.back();
      const int64_t rows = t.shape[t.shape.size() - 2];
      const int64_t count = static_cast<int64_t>(t.numel) / (rows * cols);
      for (int64_t m = 0; m < count; ++m) {
        const int64_t off = m * rows * cols;
        // The element-wise part: momentum, Nesterov mix and the update, 8 FLOPs and 7 floats
        // moved per element. Newton–Schulz, inside, has its own scope.
        const double n = static_cast<double>(rows * cols);
        ProfileScope muon_scope("muon", t.name, {rows, cols}, 8 * n, 28 * n);
        muon_update(p + off, g + off, s.muon_buffer.data() + off, rows, cols, lr, momentum,
                    static_cast<int>(config_.muon_ns_steps), ns_);
      }
    } else {
      // Moments, denominator and update: about 13 FLOPs; p, g, m, v read and p, m, v written.
      const double n = static_cast<double>(t.numel);
      ProfileScope adam_scope("adam", t.name, {static_cast<int64_t>(t.numel)}, 13 * n, 28 * n);
      adam_update(p, g, s.exp_avg.data(), s.exp_avg_sq.data(), static_cast<int64_t>(t.numel), lr,
                  adam, adam_steps_);
    }
  }
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
