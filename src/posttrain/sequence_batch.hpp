// A batch of token sequences whose marked tokens a post-training loss is taken over (RL's
// completions, DPO's chosen and rejected replies), laid out for the model: packed into rows of
// seq_len by best fit (row_packing.hpp), run in micro-batches of the model's
// micro_batch_tokens. What the losses see is one log-probability per marked token, in sequence
// order (sequence 0's marked tokens, then sequence 1's, ...); what they give back is
// dL/dlogp for each, which backward() turns into the model's gradient through the head's token
// weights (TokenLossT: a row weight of -dL/dlogp_t makes Σ_t w_t·(-logp_t) have L's gradient).
//
// With a value head (PPO, value_head.hpp), each marked token also has a value V, the head's on
// the final-norm row of the position whose logits predict the token (the row whose loss target
// it is: the state before the token was drawn), read in the same forward as the log-probability;
// backward then takes dL/dV of every marked token too, accumulates the head's gradients and sends
// value_coef·dL/dV·w into the trunk at those rows (TokenLossT::final_norm_grad).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "model/gpt.hpp"
#include "posttrain/row_packing.hpp"
#include "posttrain/value_head.hpp"

namespace nanogpt {

class SequenceBatch {
 public:
  // ids[k] is sequence k, starting with the begin token; marked[k][i] = 1 where ids[k][i] is a
  // token the loss is taken over (never the first). InputError (naming the sequence) for a
  // sequence longer than seq_len + 1.
  SequenceBatch(std::vector<std::vector<uint32_t>> ids, std::vector<std::vector<uint8_t>> marked,
                int64_t seq_len, int32_t pad_id);

  int64_t sequences() const { return static_cast<int64_t>(ids_.size()); }
  // offsets()[k] .. offsets()[k + 1]: sequence k's marked tokens in the per-token arrays.
  const std::vector<int64_t>& offsets() const { return offsets_; }
  int64_t marked_tokens() const { return offsets_.back(); }
  int64_t rows() const { return rows_.rows; }

  // log p(token) of every marked token under `model` at `temperature` (log softmax(logits/τ)),
  // in sequence order; entropy (nullable) receives each marked token's entropy of that
  // distribution. Runs the forward only.
  std::vector<double> logprobs(Gpt& model, int64_t window_blocks, float temperature,
                               std::vector<double>* entropy = nullptr);
  // The same, and `values` receives V of every marked token (in sequence order) from `head`.
  std::vector<double> logprobs(Gpt& model, int64_t window_blocks, float temperature,
                               std::vector<double>* entropy, const ValueHead& head,
                               std::vector<double>& values);
  // Adds to model.grads() the gradient of L, given dL/dlogp of every marked token (in sequence
  // order), with the log-probabilities at `temperature`. Runs forward and backward.
  void backward(Gpt& model, int64_t window_blocks, float temperature,
                std::span<const double> grad_logp);
  // The same for L = L_policy + L_value, given dL/dV of every marked token too: the head's
  // gradients accumulate in `head` (dL/dw, dL/db; it is not stepped), and the trunk receives
  // value_coef·dL/dh on top of the policy's gradient. value_coef = 0 leaves the trunk's gradient
  // exactly the plain backward's.
  void backward(Gpt& model, int64_t window_blocks, float temperature,
                std::span<const double> grad_logp, ValueHead& head,
                std::span<const double> grad_values, double value_coef);

 private:
  // Calls fn(first_row, end_row) with inputs_/targets_ holding those rows.
  template <class Fn>
  void over_rows(const Gpt& model, Fn&& fn);

  std::vector<std::vector<uint32_t>> ids_;
  std::vector<std::vector<uint8_t>> marked_;
  int64_t seq_len_;
  PackedRows rows_;
  std::vector<int64_t> offsets_;   // per sequence, into the per-token arrays
  std::vector<int64_t> position_;  // per marked token: its input position in the rows
  std::vector<int32_t> inputs_, targets_;
  // The marked tokens of rows [r0, r1) are those j with position_[j] in [r0, r1)·seq_len.
  template <class Fn>
  void marked_in(int64_t r0, int64_t r1, Fn&& fn) const;
  // Both logprobs and both backwards; head null: no values.
  std::vector<double> logprobs_impl(Gpt& model, int64_t window_blocks, float temperature,
                                    std::vector<double>* entropy, const ValueHead* head,
                                    std::vector<double>* values);
  void backward_impl(Gpt& model, int64_t window_blocks, float temperature,
                     std::span<const double> grad_logp, ValueHead* head,
                     std::span<const double> grad_values, double value_coef);
  std::vector<float> per_token_, entropy_, weights_, feature_grad_;
};

}  // namespace nanogpt
