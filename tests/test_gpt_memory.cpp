// Memory a model and its optimizer hold is theirs and counted: the kernels' scratch during
// forward_backward, forward_loss, decoding and the optimizer step lands in the owner's
// Workspace (none in the process default), the activations take what the README's formula
// says per token, and the optimizer state what it says per parameter.
#include <gtest/gtest.h>

#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "model/decoder.hpp"
#include "model/gpt.hpp"
#include "model/kv_cache.hpp"
#include "optim/gpt_optimizer.hpp"
#include "runtime/random.hpp"
#include "runtime/thread_pool.hpp"
#include "runtime/workspace.hpp"
#include "support/model.hpp"

namespace nanogpt {
namespace {

struct Batch {
  std::vector<int32_t> inputs, targets;
};

Batch batch_of(size_t tokens, uint32_t seed) {
  const std::vector<uint32_t> ids = synthetic_tokens(tokens + 1, seed);
  Batch b;
  b.inputs.assign(ids.begin(), ids.end() - 1);
  b.targets.assign(ids.begin() + 1, ids.end());
  return b;
}

// The process default starts empty, so any kernel that took its scratch there instead of from
// the model's (or optimizer's) workspace would show. Nothing runs meanwhile (pool workers never
// call into a workspace).
void empty_process_default() {
  Workspace::process_default().release();
  ASSERT_EQ(Workspace::process_default().bytes_held(), 0u);
}

// fn(config) with the micro model's config in fp32 and in bf16, on a pool of two threads.
template <class Fn>
void in_each_precision(Fn&& fn) {
  for (const char* precision : {"fp32", "bf16"}) {
    SCOPED_TRACE(precision);
    ThreadPool pool(2);
    ThreadPool::Use use(pool);
    Config c = micro_config();
    set_config_value(c, std::string("precision=") + precision);
    fn(c);
  }
}

TEST(GptMemory, KernelScratchLivesInTheModelsWorkspace) {
  in_each_precision([](const Config& c) {
    Gpt model(c);
    model.init_parameters(3);
    EXPECT_EQ(model.workspace().bytes_held(), 0u) << "nothing is held before the first call";
    const Batch b = batch_of(256, 7);
    empty_process_default();

    model.zero_grads();
    model.forward_backward(b.inputs, b.targets, 1, 1.0f / 256, 128);
    EXPECT_EQ(Workspace::process_default().bytes_held(), 0u) << "forward_backward";
    // At least the fused loss's logits: 256 rows (one block) of the padded vocabulary.
    const size_t logits = 256 * static_cast<size_t>(c.vocab_padded()) * sizeof(float);
    const size_t held = model.workspace().bytes_held();
    EXPECT_GT(held, logits);
    EXPECT_EQ(model.workspace().peak_bytes(), held) << "buffers only grow";

    // The same shapes again reuse what is held.
    model.forward_backward(b.inputs, b.targets, 1, 1.0f / 256, 128);
    EXPECT_EQ(model.workspace().bytes_held(), held);
    model.forward_loss(b.inputs, b.targets, 1, nullptr, 128);
    EXPECT_EQ(model.workspace().bytes_held(), held);

    GptDecoder decoder(model, 64, 1);
    decoder.feed(std::span<const int32_t>(b.inputs.data(), 40));
    decoder.step(b.inputs[40]);
    EXPECT_EQ(Workspace::process_default().bytes_held(), 0u) << "forward_loss and decoding";

    // The workspace moves with the model (it is the model's, not a copy) and is freed with it.
    const Workspace* workspace = &model.workspace();
    Gpt moved = std::move(model);
    EXPECT_EQ(&moved.workspace(), workspace);
    EXPECT_EQ(moved.workspace().bytes_held(), held);
    moved.workspace().release();
    EXPECT_EQ(moved.workspace().bytes_held(), 0u);
    Gpt other(c);
    EXPECT_NE(&other.workspace(), workspace) << "each model has its own";
  });
}

// The fused loss's copies of the head (W packed for the logits and, with the FP8 head, W
// rounded first) are the model's, counted in packed_weight_bytes, made again into the same
// memory at every step: a step after the weights changed gives the gradients of a fresh model
// with those weights, and holds no more than the step before.
TEST(GptMemory, TheLossKeepsItsCopiesOfTheHeadInTheModel) {
  in_each_precision([](Config c) {
    set_config_value(c, "fp8_head=true");
    Gpt model(c);
    model.init_parameters(3);
    const Batch b = batch_of(256, 7);
    model.zero_grads();
    model.forward_backward(b.inputs, b.targets, 1, 1.0f / 256, 128);
    const size_t held = model.packed_weight_bytes();
    // At least W rounded in floats and packed once (bf16: half as many bytes again).
    const size_t head = static_cast<size_t>(c.vocab_padded() * c.model_dim);
    EXPECT_GE(held, head * sizeof(float) + head * 2);

    // New weights, as after an optimizer step, then a step against a fresh model's.
    Rng rng(8);
    for (float& p : model.params().values()) p += static_cast<float>(0.05 * rng.normal());
    model.zero_grads();
    const double loss = model.forward_backward(b.inputs, b.targets, 1, 1.0f / 256, 128);
    EXPECT_EQ(model.packed_weight_bytes(), held) << "made again in place, not a second copy";
    Gpt fresh(c);
    fresh.params().values() = model.params().values();
    fresh.zero_grads();
    EXPECT_EQ(fresh.forward_backward(b.inputs, b.targets, 1, 1.0f / 256, 128), loss);
    EXPECT_TRUE(fresh.grads() == model.grads()) << "a step used a stale copy of the head";
  });
}

// The README's count (docs/ARCHITECTURE.md, "Memory"): per token, each layer keeps 7·d + 1
// floats for the residual stream and the MLP, and an attention layer d + 7·H·D + 3·H + 1 more;
// the model keeps (11 + L/2)·d + 4·H·D + 2 floats of its own (x0, the one x_mix and x_attn every
// layer uses in turn, the final norm, the backward's buffers, the U-net's skip gradients) and 16
// bytes of token, document and position. With bf16
// products, h and dh are stored in bf16, 8·d·(L + 1) bytes fewer, and the qkv projection's
// output gradient is kept rounded beside attention's, 2·3·H·D bytes more (H_kv = H), as are
// the norms the products read: 2·d bytes more for each layer's norm2 and each attention layer's
// norm1; and each attention layer keeps qkv rounded only, 2·3·H·D bytes fewer; and dx is kept
// rounded beside its fp32 rows, 2·d bytes more.
TEST(GptMemory, ActivationsTakeTheDocumentedBytesPerToken) {
  Config c = micro_config();  // layer 3 without attention
  set_config_value(c, "precision=fp32");
  Gpt model(c);
  model.init_parameters(3);
  EXPECT_EQ(model.activation_bytes(), 0u);
  const int64_t T = 256, d = c.model_dim, HD = c.num_heads * c.head_dim, H = c.num_heads;
  const int64_t L = c.num_layers;
  int64_t floats = (11 + L / 2) * d + 4 * HD + 2;
  for (int64_t i = 0; i < L; ++i) {
    floats += 7 * d + 1;
    if (c.has_attention(i)) floats += d + 7 * HD + 3 * H + 1;
  }
  const Batch b = batch_of(static_cast<size_t>(T), 9);
  model.forward_backward(b.inputs, b.targets, 1, 1.0f / T, 128);
  EXPECT_EQ(model.activation_bytes(), static_cast<size_t>(T * (4 * floats + 16)));

  // With bf16 products, h (every layer) and dh (once) are stored rounded: 2 bytes a value; and
  // the gradient of qkv_raw (once) is kept rounded as well as attention's own in fp32, and the
  // norms (norm2 every layer, norm1 with attention) rounded as well as in fp32; attention's
  // inputs (qkv) and its output (read by the output projection's products and the backward's
  // Delta) are kept rounded instead of in fp32, and the gradient of its output (once) rounded
  // instead of in fp32; and dx (once) rounded as well as in fp32, for the projections' products
  // that read it next.
  set_config_value(c, "precision=bf16");
  Gpt rounded(c);
  rounded.init_parameters(3);
  rounded.forward_backward(b.inputs, b.targets, 1, 1.0f / T, 128);
  int64_t attention_layers = 0;
  for (int64_t i = 0; i < L; ++i) attention_layers += c.has_attention(i) ? 1 : 0;
  const int64_t norms = L + attention_layers;
  EXPECT_EQ(rounded.activation_bytes(),
            static_cast<size_t>(T * (4 * floats + 16 - 2 * 4 * d * (L + 1) + 2 * 3 * HD +
                                     2 * d * norms - 2 * 3 * HD * attention_layers +
                                     (2 - 4) * HD * attention_layers - 2 * HD + 2 * d)));
}

// A cached forward (decoding, scoring) keeps one block's activations, whichever layer runs, plus
// each block's output and the model's own rows, and no backward buffers (docs/ARCHITECTURE.md,
// "Memory"): with H_kv = H, 7·d + 7·H·D + 3·H + 2 floats for the block, L·d for the outputs,
// 4·d + 2 for x0, x_mix, x_attn, the final norm and their rstd, and 16 bytes of token, document
// and position.
TEST(GptMemory, ACachedForwardKeepsOneBlocksActivations) {
  Config c = micro_config();
  set_config_value(c, "precision=fp32");
  Gpt model(c);
  model.init_parameters(3);
  const int64_t T = 96, d = c.model_dim, HD = c.num_heads * c.head_dim, H = c.num_heads;
  const int64_t L = c.num_layers;
  const int64_t floats = 7 * d + 7 * HD + 3 * H + 2 + L * d + 4 * d + 2;
  const Batch b = batch_of(static_cast<size_t>(T), 9);
  KvCache cache(c, T);
  model.forward_cached(b.inputs, 1, cache);
  const size_t cached = model.activation_bytes();
  EXPECT_EQ(cached, static_cast<size_t>(T * (4 * floats + 16)));
  // A training forward of the same rows sizes every layer's set and the backward's buffers
  // besides (the previous test's formula), several times more.
  model.forward_loss(b.inputs, b.targets, 1, nullptr, T);
  EXPECT_GT(model.activation_bytes(), 3 * cached);
}

TEST(GptMemory, OptimizerStateAndScratchAreItsOwn) {
  ThreadPool pool(2);
  ThreadPool::Use use(pool);
  Config c = micro_config();
  set_config_value(c, "precision=fp32");
  Gpt model(c);
  model.init_parameters(3);
  Rng rng(4);
  for (float& g : model.grads()) g = static_cast<float>(0.01 * rng.normal());
  GptOptimizer optimizer(model.params(), c, model.precision());
  // Muon's momentum for matrices, Adam's two moments for the rest.
  size_t muon = 0, adam = 0;
  for (const ParamTensor& t : model.params().tensors()) {
    (t.group == ParamGroup::kMatrix ? muon : adam) += t.numel;
  }
  EXPECT_EQ(optimizer.state_bytes(), 4 * muon + 8 * adam);
  EXPECT_EQ(optimizer.newton_schulz_bytes(), 0u) << "sized on the first step";
  empty_process_default();
  optimizer.step(model.params(), model.grads(), 0);
  EXPECT_EQ(Workspace::process_default().bytes_held(), 0u)
      << "Newton–Schulz's products took scratch from the process default";
  EXPECT_GT(optimizer.workspace().bytes_held(), 0u);
  // Per thread: the iterate twice and the staging buffer for the largest matrix (4d × d).
  const size_t largest = static_cast<size_t>(4 * c.model_dim * c.model_dim) * sizeof(float);
  EXPECT_GE(optimizer.newton_schulz_bytes(), 2 * 3 * largest);
}

}  // namespace
}  // namespace nanogpt
