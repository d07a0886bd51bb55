#include "posttrain/sequence_batch.hpp"

#include <algorithm>

#include "runtime/error.hpp"

namespace nanogpt {

SequenceBatch::SequenceBatch(std::vector<std::vector<uint32_t>> ids,
                             std::vector<std::vector<uint8_t>> marked, int64_t seq_len,
                             int32_t pad_id)
    : ids_(std::move(ids)), marked_(std::move(marked)), seq_len_(seq_len) {
  if (ids_.size() != marked_.size()) {
    throw Error("SequenceBatch: " + std::to_string(ids_.size()) + " sequences but " +
                std::to_string(marked_.size()) + " masks");
  }
  std::vector<PackItem> items;
  offsets_.push_back(0);
  for (size_t k = 0; k < ids_.size(); ++k) {
    items.push_back({ids_[k], marked_[k]});
    int64_t n = 0;
    for (uint8_t m : marked_[k]) n += m != 0 ? 1 : 0;
    offsets_.push_back(offsets_.back() + n);
  }
  rows_ =
      pack_rows(items, seq_len, pad_id, [](size_t k) { return "sequence " + std::to_string(k); });
  // Items sit in their row in input order from position 0; id i of an item at row offset `at`
  // is the target of input position at + i - 1.
  position_.resize(static_cast<size_t>(offsets_.back()));
  for (int64_t r = 0; r < rows_.rows; ++r) {
    int64_t at = 0;
    for (int64_t k : rows_.items[static_cast<size_t>(r)]) {
      const auto& mk = marked_[static_cast<size_t>(k)];
      int64_t j = offsets_[static_cast<size_t>(k)];
      for (size_t i = 0; i < mk.size(); ++i) {
        if (mk[i] == 0) continue;
        if (i == 0) throw Error("SequenceBatch: a sequence's first token cannot be marked");
        position_[static_cast<size_t>(j++)] = r * seq_len_ + at + static_cast<int64_t>(i) - 1;
      }
      at += static_cast<int64_t>(mk.size());
    }
  }
}

template <class Fn>
void SequenceBatch::over_rows(const Gpt& model, Fn&& fn) {
  const int64_t per_pass = std::max<int64_t>(1, model.config().micro_batch_tokens / seq_len_);
  for (int64_t r0 = 0; r0 < rows_.rows; r0 += per_pass) {
    const int64_t r1 = std::min(rows_.rows, r0 + per_pass);
    inputs_.clear();
    targets_.clear();
    for (int64_t r = r0; r < r1; ++r) {
      const auto in = rows_.row_inputs(r), tg = rows_.row_targets(r);
      inputs_.insert(inputs_.end(), in.begin(), in.end());
      targets_.insert(targets_.end(), tg.begin(), tg.end());
    }
    fn(r0, r1);
  }
}

template <class Fn>
void SequenceBatch::marked_in(int64_t r0, int64_t r1, Fn&& fn) const {
  const int64_t begin = r0 * seq_len_, end = r1 * seq_len_;
  for (size_t j = 0; j < position_.size(); ++j) {
    if (position_[j] >= begin && position_[j] < end) fn(j, position_[j] - begin);
  }
}

std::vector<double> SequenceBatch::logprobs(Gpt& model, int64_t window_blocks, float temperature,
                                            std::vector<double>* entropy) {
  return logprobs_impl(model, window_blocks, temperature, entropy, nullptr, nullptr);
}

std::vector<double> SequenceBatch::logprobs(Gpt& model, int64_t window_blocks, float temperature,
                                            std::vector<double>* entropy, const ValueHead& head,
                                            std::vector<double>& values) {
  return logprobs_impl(model, window_blocks, temperature, entropy, &head, &values);
}

std::vector<double> SequenceBatch::logprobs_impl(Gpt& model, int64_t window_blocks,
                                                 float temperature, std::vector<double>* entropy,
                                                 const ValueHead* head,
                                                 std::vector<double>* values) {
  const int64_t d = model.config().model_dim;
  if (head != nullptr && head->model_dim() != d) {
    throw Error("SequenceBatch::logprobs: a value head of " + std::to_string(head->model_dim()) +
                " inputs on a model of model_dim " + std::to_string(d));
  }
  const auto T = static_cast<size_t>(rows_.rows * seq_len_);
  per_token_.resize(T);
  entropy_.resize(entropy != nullptr ? T : 0);
  if (values != nullptr) values->assign(position_.size(), 0.0);
  over_rows(model, [&](int64_t r0, int64_t r1) {
    TokenLossT<float> tl;
    tl.temperature = temperature;
    tl.entropy = entropy != nullptr ? entropy_.data() + r0 * seq_len_ : nullptr;
    model.forward_loss(inputs_, targets_, window_blocks, per_token_.data() + r0 * seq_len_,
                       seq_len_, tl);
    if (head == nullptr) return;
    // The rows the logits of these positions were made from, still in the model.
    const float* rows = model.final_norm().data();
    marked_in(r0, r1, [&](size_t j, int64_t at) { (*values)[j] = head->value(rows + at * d); });
  });
  std::vector<double> lp(position_.size());
  if (entropy != nullptr) entropy->resize(position_.size());
  for (size_t j = 0; j < position_.size(); ++j) {
    const auto at = static_cast<size_t>(position_[j]);
    lp[j] = -static_cast<double>(per_token_[at]);
    if (entropy != nullptr) (*entropy)[j] = entropy_[at];
  }
  return lp;
}

void SequenceBatch::backward(Gpt& model, int64_t window_blocks, float temperature,
                             std::span<const double> grad_logp) {
  backward_impl(model, window_blocks, temperature, grad_logp, nullptr, {}, 0.0);
}

void SequenceBatch::backward(Gpt& model, int64_t window_blocks, float temperature,
                             std::span<const double> grad_logp, ValueHead& head,
                             std::span<const double> grad_values, double value_coef) {
  if (grad_values.size() != position_.size()) {
    throw Error("SequenceBatch::backward: " + std::to_string(grad_values.size()) +
                " value gradients for " + std::to_string(position_.size()) + " marked tokens");
  }
  if (head.model_dim() != model.config().model_dim) {
    throw Error("SequenceBatch::backward: a value head of " + std::to_string(head.model_dim()) +
                " inputs on a model of model_dim " + std::to_string(model.config().model_dim));
  }
  backward_impl(model, window_blocks, temperature, grad_logp, &head, grad_values, value_coef);
}

void SequenceBatch::backward_impl(Gpt& model, int64_t window_blocks, float temperature,
                                  std::span<const double> grad_logp, ValueHead* head,
                                  std::span<const double> grad_values, double value_coef) {
  if (grad_logp.size() != position_.size()) {
    throw Error("SequenceBatch::backward: " + std::to_string(grad_logp.size()) + " gradients for " +
                std::to_string(position_.size()) + " marked tokens");
  }
  weights_.assign(static_cast<size_t>(rows_.rows * seq_len_), 0.0f);
  for (size_t j = 0; j < position_.size(); ++j) {
    weights_[static_cast<size_t>(position_[j])] = static_cast<float>(-grad_logp[j]);
  }
  const int64_t d = model.config().model_dim;
  // The trunk's share of the value loss only when it has one: value_coef = 0 runs the plain
  // backward, bit for bit.
  const bool to_trunk = head != nullptr && value_coef != 0;
  over_rows(model, [&](int64_t r0, int64_t r1) {
    TokenLossT<float> tl;
    tl.temperature = temperature;
    const auto n = static_cast<size_t>((r1 - r0) * seq_len_);
    tl.weights = std::span<const float>(weights_.data() + r0 * seq_len_, n);
    if (to_trunk) {
      feature_grad_.assign(n * static_cast<size_t>(d), 0.0f);
      marked_in(r0, r1, [&](size_t j, int64_t at) {
        head->feature_grad(grad_values[j], value_coef, feature_grad_.data() + at * d);
      });
      tl.final_norm_grad = feature_grad_;
    }
    model.forward_backward(inputs_, targets_, window_blocks, 1.0f, seq_len_, nullptr, tl);
    if (head == nullptr) return;
    const float* rows = model.final_norm().data();
    marked_in(r0, r1,
              [&](size_t j, int64_t at) { head->accumulate(rows + at * d, grad_values[j]); });
  });
}

}  // namespace nanogpt
