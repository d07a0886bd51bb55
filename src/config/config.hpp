// Every knob of a run in one flat structure, under the seed's names where the seed has one
// (`num_layers`, `train_seq_len`, `cooldown_frac`, ...), so a speedrun user recognises them.
// Presets give the defaults; a JSON file or `--set key=value` overrides any key; invalid
// values are rejected before any work, naming the field and what is allowed.
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "kernels/matmul.hpp"
#include "runtime/integer_math.hpp"

namespace nanogpt {

// What the `precision` key asks for; a run multiplies in the Precision it resolves to.
enum class PrecisionSetting { kAuto, kFp32, kBf16 };
// What updates the blocks' hidden matrices, the key `matrix_optimizer`: "muon" or "adam".
enum class MatrixOptimizer { kMuon, kAdam };
// How replicas synchronise (the key `sync`), and how layers map to Streaming DiLoCo's
// fragments (`fragment_order`).
enum class SyncMode { kDdp, kDiloco, kStreamingDiloco };
enum class FragmentOrder { kStrided, kSequential };

struct Config {
  // Model (seed: GPT(vocab_size, num_layers, num_heads, model_dim)). The seed's 50257 is GPT-2's
  // vocabulary; ours appends the four chat tokens (data/bpe_tokenizer.hpp), and both pad to the
  // same 50304 rows of the head.
  int64_t vocab_size = 50261;
  int64_t num_layers = 12;
  int64_t num_heads = 6;
  // Key/value heads (grouped-query attention): must divide num_heads, each shared by a group of
  // num_heads / num_kv_heads query heads; 1 is multi-query; 0 means num_heads (the seed's model).
  int64_t num_kv_heads = 0;
  int64_t head_dim = 128;
  int64_t model_dim = 768;
  std::vector<int64_t> attn_free_layers = {7};  // the seed drops attention in layer 7 of 12
  int64_t eot_id = 50256;
  bool fp8_head = true;
  // Mixture of experts (0 experts: every MLP dense, the seed's model). In the blocks listed in
  // moe_layers the MLP becomes num_experts expert MLPs of moe_hidden_dim (0: 4·model_dim), each
  // token sent to its experts_per_token most probable ones by a linear router (dropless: no
  // capacity limit). moe_aux_loss_coef weights the Switch/GShard load-balancing loss E·Σ f_e·P_e;
  // 0.01 is Switch Transformer's α: it evens the load without competing with the language loss.
  int64_t num_experts = 0;
  int64_t experts_per_token = 2;
  std::vector<int64_t> moe_layers = {};
  int64_t moe_hidden_dim = 0;
  double moe_aux_loss_coef = 0.01;
  double attn_scale = 0.12;
  double logit_softcap = 30.0;
  // Arithmetic of the matrix products, the key `precision`: "fp32", "bf16" (bf16 operands into
  // the GEMMs, attention and the head, fp32 accumulation; fp32 master weights, optimizer state,
  // norms, softmax statistics and loss), or "auto": decided by this CPU (resolved_precision).
  PrecisionSetting precision = PrecisionSetting::kAuto;

  // Data and batches.
  int64_t train_seq_len = 48 * 1024;
  int64_t tokens_per_step = 8 * 48 * 1024;  // the seed: 8 GPUs × train_seq_len
  int64_t val_seq_len = 4 * 64 * 1024;
  int64_t val_tokens = 10485760;
  int64_t block_size = 128;          // attention mask granularity
  int64_t max_window_tokens = 1728;  // window schedule's end point, in tokens
  bool align_to_eot = false;         // start every training sequence at a document
  // Tokens per forward/backward pass: a step's sequences are batched, whole, up to this many
  // (at least one sequence per pass), so every product is that many rows tall. More rows use
  // the matrix units better and pack each weight fewer times; activation memory grows with it
  // (about (17.5·num_layers + 15)·model_dim floats per token; docs/ARCHITECTURE.md, "Memory").
  int64_t micro_batch_tokens = 8192;

  // Schedule.
  int64_t num_iterations = 1770;
  double cooldown_frac = 0.4;
  int64_t val_loss_every = 125;  // 0: only at the end
  int64_t checkpoint_every = 0;  // 0: only at the end
  int64_t seed = 0;

  // Optimizers.
  double muon_lr = 0.05;
  double muon_momentum_start = 0.85;
  double muon_momentum_end = 0.95;
  int64_t muon_momentum_warmup = 300;
  int64_t muon_ns_steps = 5;
  double adam_head_lr = 0.22;
  double adam_embed_lr = 0.6;
  double adam_scalar_lr = 0.04;
  double adam_beta1 = 0.8;
  double adam_beta2 = 0.95;
  double adam_eps = 1e-10;

  // Data-parallel training under mpirun (nothing changes in a single process). Gradients travel
  // in buckets of about bucket_mb MiB (the seed's 25), each sent as soon as the backward has
  // finished it; comm_thread: a communication thread advances the transfers (true), or the
  // backward polls them between its layers (false). Polling measured faster with every core
  // computing (AMD EPYC Zen 5, 2 ranks x 1 thread, cpu preset: 0.94-1.04x the 1 x 2 threads
  // throughput against 0.87-0.96x with the thread, which takes time slices from the compute);
  // the thread hides more of long transfers (speedrun at 1024: 3% of the step exposed vs 8%).
  double bucket_mb = 25;
  bool comm_thread = false;

  // Training across replicas that meet rarely (optim/streaming_diloco.hpp). sync: "ddp" (every
  // step, above), "diloco" or "streaming_diloco". Under mpirun the ranks form `replicas` groups
  // (0: one per rank), each a data-parallel trainer on its own part of every global batch;
  // every sync_every inner steps each fragment's outer gradient θ_global − θ_local, averaged
  // over the replicas, takes one step of SGD with Nesterov momentum (outer_lr, outer_momentum;
  // DiLoCo's and torchft's 0.7 and 0.9). "diloco" syncs the whole model at once and waits for
  // it. "streaming_diloco" (Douillard et al. 2025) cuts the blocks into `fragments` (0: one
  // per 3 layers) by fragment_order ("strided": layer i in fragment i mod P, the paper's
  // choice; or "sequential"), syncs fragment p at steps where (step − p·H/P) mod H = 0, and
  // applies its result sync_delay steps later (τ; -1: 1 for streaming, 0 for diloco) while
  // training goes on, merging θ ← α·θ_local + (1−α)·θ_global (fragment_merge_alpha = α;
  // -1: 0.5 with a delay, 0 without). Outer gradients travel as outer_grad_bits-bit values
  // (optim/outer_grad_codec.hpp; 0: 4 for streaming, 32 for diloco).
  SyncMode sync = SyncMode::kDdp;
  int64_t replicas = 0;
  int64_t sync_every = 100;
  double outer_lr = 0.7;
  double outer_momentum = 0.9;
  int64_t fragments = 0;
  FragmentOrder fragment_order = FragmentOrder::kStrided;
  int64_t sync_delay = -1;
  double fragment_merge_alpha = -1;
  int64_t outer_grad_bits = 0;
  // Switches for the seed's components, to measure what each is worth (issue 15); the defaults
  // are the seed's recipe, and a switched-off component leaves nothing behind: no parameters,
  // no checkpoint tensors, no optimizer state, no arithmetic.
  // matrix_optimizer "adam": the blocks' hidden matrices are Adam's (adam_beta1, adam_beta2,
  // adam_eps, the same LR schedule) at adam_matrix_lr instead of Muon's at muon_lr.
  // adam_matrix_lr 0.003: Muon moves a matrix's entries by muon_lr/√cols in RMS (an update
  // with singular values near 1, times √max(1, rows/cols)): 0.05/16 ≈ 0.003 for the cpu
  // preset's fan-in of 256 (0.0018 for the seed's 768). Adam's first steps move every entry by
  // about its lr, so 0.003 starts Adam at Muon's step size. A 60-step probe on fortunes (cpu
  // preset, num_iterations=60) agrees: validation loss 5.48, 5.45, 6.26 at 0.001, 0.003, 0.01.
  // Tune it over a grid before comparing Adam with Muon.
  MatrixOptimizer matrix_optimizer = MatrixOptimizer::kMuon;
  double adam_matrix_lr = 0.003;
  // false: no value embeddings; every attention layer's v is λa0·v (the seed's middle layers).
  bool value_embeddings = true;
  // false: no U-net skip connections and no skip_weights; each block reads the previous output.
  bool unet_skips = true;
  // false: no mixing with x0 and no per-block lambdas; a block reads the previous block's
  // output (plus its skip), and x0 only feeds block 0.
  bool x0_mixing = true;
  // false: the attention window is max_window_tokens (clamped to train_seq_len) from step 0
  // instead of growing from one block.
  bool window_warmup = true;

  int64_t vocab_padded() const { return round_up(vocab_size, 128); }
  int64_t grad_accum_steps() const { return tokens_per_step / train_seq_len; }
  // Whole sequences of `seq_len` per forward/backward pass under micro_batch_tokens.
  int64_t sequences_per_pass(int64_t seq_len) const;
  bool has_attention(int64_t layer) const;
  // Whether `layer`'s MLP is a mixture of experts, and each expert's hidden width.
  bool is_moe_layer(int64_t layer) const;
  int64_t moe_hidden() const { return moe_hidden_dim > 0 ? moe_hidden_dim : 4 * model_dim; }
  // The seed's long/short window pattern.
  bool is_long_window(int64_t layer) const;
  // The window in blocks of `layer` when the long layers' is window_blocks: short layers see
  // half, at least one block (whether the layer has attention at all is has_attention's).
  int64_t layer_window_blocks(int64_t layer, int64_t window_blocks) const;
  // Index (0..2) of the value embedding feeding `layer`, or -1 (always -1 without
  // value_embeddings).
  int value_embed_index(int64_t layer) const;
  // The DiLoCo keys with their mode's defaults resolved: fragments P (1 unless streaming), the
  // delay τ, the merge weight α and the bits per outer-gradient value.
  int64_t outer_fragments() const;
  int64_t outer_sync_delay() const;
  double outer_merge_alpha() const;
  int outer_bits() const;
};

// Names of the built-in presets and their configurations ("speedrun", "cpu").
std::vector<std::string> preset_names();
Config preset(const std::string& name);

// Where each key given explicitly got its value ("--set vocab_size=1024", "configuration file
// 'c.json'"); a key not in it holds the preset's default, which the data may replace
// (train/shard_meta.hpp).
using ConfigOrigins = std::map<std::string, std::string>;

// PRESET or FILE.json (a preset name, or a JSON object over a preset given by its "preset"
// key, default "cpu"). With `origins`, records the keys the file sets.
Config load_config(const std::string& preset_or_file, ConfigOrigins* origins = nullptr);
// Applies "key=value"; the value is parsed as the key's type. With `origins`, records the key.
void set_config_value(Config& config, const std::string& assignment,
                      ConfigOrigins* origins = nullptr);
// Throws InputError naming the first invalid field and what is allowed.
void validate_config(const Config& config);

// The precision a run multiplies in: fp32 or bf16 as set, and for "auto" bf16 where this CPU
// multiplies bf16 faster than fp32 (AMX, or AVX512-BF16 where the autotuner timed VDPBF16PS
// faster than the FMA units), else fp32. Deciding "auto" may time the bf16 micro-kernels the
// first time in a process (microkernel_dispatch.cpp), so it is resolved once, where a run
// starts: Gpt's constructor resolves it and keeps it (Gpt::precision()), and everything else —
// the optimizer, run.json, `bench train` — takes the model's.
Precision resolved_precision(const Config& config);
// "fp32" or "bf16".
const char* precision_name(Precision p);
// "auto", "fp32" or "bf16", as the key is spelled.
const char* precision_setting_name(PrecisionSetting p);
// "muon" or "adam", as the key is spelled.
const char* matrix_optimizer_name(MatrixOptimizer m);
// "ddp", "diloco", "streaming_diloco"; "strided", "sequential".
const char* sync_mode_name(SyncMode m);
const char* fragment_order_name(FragmentOrder o);

nlohmann::ordered_json config_to_json(const Config& config);
Config config_from_json(const nlohmann::json& j, Config base);

}  // namespace nanogpt
