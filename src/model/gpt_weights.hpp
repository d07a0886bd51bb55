// Typed views of the GPT's parameters: a struct of pointers per block and one for the tensors
// outside the blocks, built once when the model is constructed. The same struct views the
// weights and (over the gradient buffer, which shares their layout) the gradients, so the
// forward and backward name what they touch instead of looking tensors up by name per call.
#pragma once

#include <array>
#include <vector>

namespace nanogpt {

template <class Real>
struct BlockWeights {
  // Attention; all null in an attention-free block.
  // [(H + 2·H_kv)·D, d]: the q, k and v projections, one after another (attn.qkv_w [3, H·D, d]
  // or, with grouped-query attention, attn.q_w, attn.k_w, attn.v_w).
  Real* qkv_w = nullptr;
  Real* attn_lambdas = nullptr;  // [2]: v = λa0·v + λa1·ve
  Real* attn_proj = nullptr;     // [d, H·D]: attn.c_proj
  Real* value_embed = nullptr;   // [V, H_kv·D]: the value embedding this block mixes in, or null
  // MLP: dense (c_fc, mlp_proj) or, in a mixture-of-experts block, router and experts.
  Real* c_fc = nullptr;         // [4d, d]
  Real* mlp_proj = nullptr;     // [d, 4d]: mlp.c_proj
  Real* router = nullptr;       // [E, d]: mlp.router.weight
  Real* expert_fc = nullptr;    // [E, hidden, d]: mlp.experts.c_fc.weight
  Real* expert_proj = nullptr;  // [E, d, hidden]: mlp.experts.c_proj.weight
  Real* lambdas = nullptr;      // [2]: x = λ0·x + λ1·x0
};

template <class Real>
struct GptWeights {
  Real* embed = nullptr;                // [V, d]
  std::array<Real*, 3> value_embeds{};  // [V, H_kv·D] each
  Real* lm_head = nullptr;              // [V padded, d]
  Real* skip_weights = nullptr;         // [L/2]
  std::vector<BlockWeights<Real>> blocks;
};

}  // namespace nanogpt
