#include "train/train_step.hpp"

#include <algorithm>
#include <cmath>
#include <string>

#include "optim/gpt_optimizer.hpp"
#include "runtime/error.hpp"
#include "runtime/profiler.hpp"

namespace nanogpt {

namespace {

std::string first_non_finite(const Gpt& model) {
  for (const ParamTensor& t : model.params().tensors()) {
    const float* p = model.params().values().data() + t.offset;
    const float* g = model.grads().data() + t.offset;
    for (size_t i = 0; i < t.numel; ++i) {
      if (!std::isfinite(g[i]))
        return "gradient of " + t.name + " (element " + std::to_string(i) + ")";
      if (!std::isfinite(p[i]))
        return "parameter " + t.name + " (element " + std::to_string(i) + ")";
    }
  }
  return "none of the parameters or gradients (the loss itself overflowed)";
}

}  // namespace

double run_train_step(Gpt& model, GptOptimizer& optimizer, std::span<const int32_t> inputs,
                      std::span<const int32_t> targets, int64_t step, int64_t window_blocks,
                      int replicas) {
  const Config& c = model.config();
  const int64_t T = c.train_seq_len;
  Comm& comm = optimizer.comm();
  const int64_t group_tokens = c.tokens_per_step / replicas;
  const int64_t local_tokens = group_tokens / comm.size();
  if (static_cast<int64_t>(inputs.size()) != local_tokens || targets.size() != inputs.size()) {
    throw Error("run_train_step: a rank's batch must hold tokens_per_step / ranks (" +
                std::to_string(local_tokens) + ") inputs and targets, got " +
                std::to_string(inputs.size()) + " and " + std::to_string(targets.size()));
  }
  const int64_t seqs = local_tokens / T;
  const int64_t per_pass = c.sequences_per_pass(T);
  const float loss_scale = 1.0f / static_cast<float>(group_tokens);
  model.zero_grads();
  double loss_sum = 0;
  for (int64_t s = 0; s < seqs; s += per_pass) {
    const auto first = static_cast<size_t>(s * T);
    const auto count = static_cast<size_t>(std::min(per_pass, seqs - s) * T);
    // Its self time is whatever in the model no finer scope covers.
    ProfileScope scope("forward_backward", "micro_batch", {static_cast<int64_t>(count), T}, 0, 0);
    // The last pass finishes the gradients: its backward sends them as they become final.
    BackwardListener* listener =
        s + per_pass >= seqs ? optimizer.begin_gradient_reduction(model.grads().data()) : nullptr;
    loss_sum += model.forward_backward(inputs.subspan(first, count), targets.subspan(first, count),
                                       window_blocks, loss_scale, T, listener);
  }
  // Every rank's sum, so every rank sees the same loss and stops on the same divergence.
  loss_sum = comm.sum(loss_sum, "training loss");
  const double loss = loss_sum / static_cast<double>(group_tokens);
  if (!std::isfinite(loss)) {
    throw Error("training diverged at step " + std::to_string(step + 1) + ": loss is " +
                std::to_string(loss) + "; first non-finite tensor: " + first_non_finite(model) +
                ". Lower the learning rates (e.g. --set muon_lr=..., adam_embed_lr=...)");
  }
  optimizer.step(model.params(), model.grads(), step);
  return loss;
}

FlopCount train_step_flops(const Config& c, int64_t window_blocks) {
  FlopCount f = sequence_flops(c, c.train_seq_len, window_blocks, /*backward=*/true)
                    .scaled(static_cast<double>(c.tokens_per_step / c.train_seq_len));
  f.newton_schulz = muon_newton_schulz_flops(c);
  return f;
}

}  // namespace nanogpt
