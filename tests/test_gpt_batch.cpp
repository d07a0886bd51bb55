// A batch of sequences laid end to end is the same computation as the sequences one by one:
// no token sees another sequence, positions restart, and the loss and every gradient are the
// sums over the sequences (up to the order of fp32 summation inside the products).
#include <gtest/gtest.h>

#include <cmath>

#include "model/gpt.hpp"
#include "runtime/error.hpp"
#include "runtime/random.hpp"
#include "support/model.hpp"

namespace nanogpt {
namespace {

struct BatchRun {
  double loss = 0;
  AlignedVector<float> grads;
  std::vector<float> per_token;
};

// Random non-zero weights (the seed zeroes the projections and the head, which would hide
// most of the model from the comparison).
Gpt make_model(const Config& c) {
  Gpt model(c);
  model.init_parameters(3);
  Rng rng(4);
  for (float& p : model.params().values()) p += static_cast<float>(0.05 * rng.normal());
  return model;
}

// Sequences that do not all start with EOT, so the batch boundary itself must separate them.
void make_batch(int64_t seqs, int64_t T, std::vector<int32_t>& in, std::vector<int32_t>& tg) {
  const auto tokens = synthetic_tokens(static_cast<size_t>(seqs * T + 1) + 37, 21);
  in.assign(tokens.begin() + 37, tokens.end() - 1);
  tg.assign(tokens.begin() + 38, tokens.end());
}

TEST(GptBatch, BatchedSequencesEqualTheSequencesOneByOne) {
  for (const char* precision : {"fp32", "bf16"}) {
    SCOPED_TRACE(precision);
    Config c = micro_config();
    set_config_value(c, std::string("precision=") + precision);
    const int64_t T = c.train_seq_len, seqs = 3, W = 2;
    std::vector<int32_t> in, tg;
    make_batch(seqs, T, in, tg);
    const std::span<const int32_t> ins(in), tgs(tg);

    Gpt one = make_model(c);
    one.zero_grads();
    BatchRun a;
    for (int64_t s = 0; s < seqs; ++s) {
      a.loss += one.forward_backward(ins.subspan(s * T, T), tgs.subspan(s * T, T), W, 0.01f);
    }
    a.grads = one.grads();

    Gpt batched = make_model(c);
    batched.zero_grads();
    BatchRun b;
    b.loss = batched.forward_backward(ins, tgs, W, 0.01f, T);
    b.grads = batched.grads();

    // fp32 sums of the same terms in another grouping (rows of a taller product): a few ulp
    // of the loss; gradients relative to each tensor's largest entry.
    const double loss_tol = std::string(precision) == "fp32" ? 1e-6 : 1e-4;
    EXPECT_NEAR(b.loss, a.loss, loss_tol * std::abs(a.loss));
    const double grad_tol = std::string(precision) == "fp32" ? 2e-5 : 2e-3;
    for (const ParamTensor& t : one.params().tensors()) {
      double scale = 0, worst = 0;
      for (size_t i = 0; i < t.numel; ++i)
        scale = std::max(scale, std::abs(double{a.grads[t.offset + i]}));
      ASSERT_GT(scale, 0) << t.name << ": gradient is zero, the test would prove nothing";
      for (size_t i = 0; i < t.numel; ++i) {
        worst = std::max(worst, std::abs(double{a.grads[t.offset + i]} - b.grads[t.offset + i]));
      }
      EXPECT_LE(worst / scale, grad_tol) << t.name;
    }
  }
}

TEST(GptBatch, ForwardLossPerTokenMatchesSequenceBySequence) {
  Config c = micro_config();
  c.precision = PrecisionSetting::kFp32;
  const int64_t T = c.train_seq_len, seqs = 2, W = 2;
  std::vector<int32_t> in, tg;
  make_batch(seqs, T, in, tg);
  const std::span<const int32_t> ins(in), tgs(tg);
  Gpt model = make_model(c);
  std::vector<float> batched(static_cast<size_t>(seqs * T)), single(static_cast<size_t>(T));
  model.forward_loss(ins, tgs, W, batched.data(), T);
  for (int64_t s = 0; s < seqs; ++s) {
    model.forward_loss(ins.subspan(s * T, T), tgs.subspan(s * T, T), W, single.data());
    for (int64_t t = 0; t < T; ++t) {
      // The second sequence's first tokens would see the first sequence's last ones (and its
      // positions would not restart) if the batch leaked: far more than rounding apart.
      EXPECT_NEAR(batched[static_cast<size_t>(s * T + t)], single[static_cast<size_t>(t)], 1e-5)
          << "sequence " << s << " token " << t;
    }
  }
}

TEST(GptBatch, RejectsBatchesThatAreNotWholeSequencesOrMisalignedWithTheMask) {
  Config c = micro_config();
  Gpt model = make_model(c);
  std::vector<int32_t> in, tg;
  make_batch(2, c.train_seq_len, in, tg);
  auto message = [&](int64_t seq_len, size_t n) {
    try {
      model.forward_loss(std::span<const int32_t>(in).first(n),
                         std::span<const int32_t>(tg).first(n), 1, nullptr, seq_len);
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message(100, 256).find("not a whole number of 100-token sequences"), std::string::npos);
  // 64-token sequences: whole, but the 128-token mask blocks would straddle them.
  EXPECT_NE(message(64, 256).find("multiple of block_size (128)"), std::string::npos);
  // One sequence of any length is fine.
  EXPECT_EQ(message(0, 100), "no error");
}

}  // namespace
}  // namespace nanogpt
