#include "eval/model_scorer.hpp"

#include <cmath>

#include "model/model_kernels.hpp"
#include "runtime/error.hpp"

namespace nanogpt {

ModelScorer::ModelScorer(Gpt& model, int64_t window_blocks)
    : model_(model), window_blocks_(window_blocks) {}

void ModelScorer::reserve(int64_t positions) {
  if (positions <= capacity_) return;
  capacity_ = (positions + 255) / 256 * 256;
  empty_ = std::make_unique<KvCache>(model_.config(), capacity_);
  base_ = std::make_unique<KvCache>(*empty_);
  branch_ = std::make_unique<KvCache>(*empty_);
}

KvCache& ModelScorer::fresh_base(int64_t positions) {
  reserve(positions);
  *base_ = *empty_;
  return *base_;
}

KvCache& ModelScorer::branch() {
  *branch_ = *base_;
  return *branch_;
}

std::vector<float> ModelScorer::head_logprobs(const float* rows, std::span<const int32_t> targets) {
  const Config& c = model_.config();
  // The head as forward_loss runs it (gpt.cpp's loss_params): the same fused kernel, so a
  // row's loss here is the loss a full forward gives that position.
  LossArgs<float> p;
  p.precision = model_.precision();
  p.T = static_cast<int64_t>(targets.size());
  p.d = c.model_dim;
  p.V = c.vocab_padded();
  p.x = rows;
  p.W = model_.weights().lm_head;
  p.targets = targets.data();
  p.softcap = static_cast<float>(c.logit_softcap);
  p.softcap_divisor = static_cast<float>(7.5 * std::sqrt(static_cast<double>(c.model_dim)));
  p.fp8 = c.fp8_head;
  std::vector<float> loss(targets.size());
  const Workspace::Use scratch(model_.workspace());
  model_loss_forward(p, loss.data());
  for (float& l : loss) l = -l;
  return loss;
}

namespace {

void check_ids(std::span<const uint32_t> ids, const Config& c, const char* what) {
  for (uint32_t t : ids) {
    if (static_cast<int64_t>(t) >= c.vocab_size) {
      throw InputError(std::string(what) + " has token id " + std::to_string(t) +
                       ", outside the model's vocabulary of " + std::to_string(c.vocab_size) +
                       " (was the suite tokenized for another model?)");
    }
  }
}

}  // namespace

double ModelScorer::text_logprob(std::span<const uint32_t> tokens) {
  if (tokens.empty()) throw InputError("cannot score an empty text");
  const Config& c = model_.config();
  check_ids(tokens, c, "the text");
  std::vector<int32_t> inputs, targets;
  inputs.push_back(static_cast<int32_t>(c.eot_id));
  for (size_t i = 0; i < tokens.size(); ++i) {
    targets.push_back(static_cast<int32_t>(tokens[i]));
    if (i + 1 < tokens.size()) inputs.push_back(static_cast<int32_t>(tokens[i]));
  }
  KvCache& cache = fresh_base(static_cast<int64_t>(inputs.size()));
  model_.forward_cached(inputs, window_blocks_, cache);
  double sum = 0;
  for (float l : head_logprobs(model_.final_norm().data(), targets)) sum += l;
  return sum;
}

std::vector<double> ModelScorer::continuation_logprobs(
    std::span<const uint32_t> context, const std::vector<std::vector<uint32_t>>& continuations) {
  if (context.empty()) throw InputError("cannot score continuations of an empty context");
  const Config& c = model_.config();
  check_ids(context, c, "the context");
  size_t longest = 0;
  for (const auto& cont : continuations) {
    if (cont.empty()) throw InputError("cannot score an empty continuation");
    check_ids(cont, c, "a continuation");
    longest = std::max(longest, cont.size());
  }
  // EOT and the context but its last token: the prefix every choice shares.
  std::vector<int32_t> prefix;
  prefix.push_back(static_cast<int32_t>(c.eot_id));
  for (size_t i = 0; i + 1 < context.size(); ++i)
    prefix.push_back(static_cast<int32_t>(context[i]));
  KvCache& shared = fresh_base(static_cast<int64_t>(prefix.size() + longest));
  model_.forward_cached(prefix, window_blocks_, shared);
  // Each choice's final-norm rows are gathered and the head runs once over all of them: the
  // head's product packs the whole vocabulary's weights per call, which at ~15 rows a choice
  // cost more than the product itself.
  const int64_t d = c.model_dim;
  rows_.clear();
  std::vector<int32_t> inputs, targets;
  std::vector<size_t> ends;
  for (const auto& cont : continuations) {
    KvCache& cache = branch();  // the shared prefix's keys and values
    inputs.assign(1, static_cast<int32_t>(context.back()));
    for (size_t j = 0; j < cont.size(); ++j) {
      targets.push_back(static_cast<int32_t>(cont[j]));
      if (j + 1 < cont.size()) inputs.push_back(static_cast<int32_t>(cont[j]));
    }
    model_.forward_cached(inputs, window_blocks_, cache);
    const float* x = model_.final_norm().data();
    rows_.insert(rows_.end(), x, x + static_cast<int64_t>(inputs.size()) * d);
    ends.push_back(targets.size());
  }
  const std::vector<float> lp = head_logprobs(rows_.data(), targets);
  std::vector<double> out;
  out.reserve(continuations.size());
  size_t begin = 0;
  for (size_t end : ends) {
    double sum = 0;
    for (size_t j = begin; j < end; ++j) sum += lp[j];
    out.push_back(sum);
    begin = end;
  }
  return out;
}

}  // namespace nanogpt
