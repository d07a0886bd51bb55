#include "config/config.hpp"

#include <algorithm>
#include <functional>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <variant>

#include "kernels/gemm/isa.hpp"
#include "kernels/gemm/microkernel.hpp"
#include "runtime/error.hpp"
#include "runtime/file_io.hpp"

namespace nanogpt {

namespace {

using FieldPtr =
    std::variant<int64_t Config::*, double Config::*, bool Config::*, PrecisionSetting Config::*,
                 MatrixOptimizer Config::*, SyncMode Config::*, FragmentOrder Config::*,
                 std::vector<int64_t> Config::*>;

struct Field {
  const char* name;
  FieldPtr ptr;
};

// The single list of keys: JSON, --set and --print-config all go through it.
const std::vector<Field>& fields() {
  static const std::vector<Field> f = {
      {"vocab_size", &Config::vocab_size},
      {"num_layers", &Config::num_layers},
      {"num_heads", &Config::num_heads},
      {"num_kv_heads", &Config::num_kv_heads},
      {"head_dim", &Config::head_dim},
      {"model_dim", &Config::model_dim},
      {"attn_free_layers", &Config::attn_free_layers},
      {"eot_id", &Config::eot_id},
      {"fp8_head", &Config::fp8_head},
      {"num_experts", &Config::num_experts},
      {"experts_per_token", &Config::experts_per_token},
      {"moe_layers", &Config::moe_layers},
      {"moe_hidden_dim", &Config::moe_hidden_dim},
      {"moe_aux_loss_coef", &Config::moe_aux_loss_coef},
      {"attn_scale", &Config::attn_scale},
      {"logit_softcap", &Config::logit_softcap},
      {"precision", &Config::precision},
      {"train_seq_len", &Config::train_seq_len},
      {"tokens_per_step", &Config::tokens_per_step},
      {"val_seq_len", &Config::val_seq_len},
      {"val_tokens", &Config::val_tokens},
      {"block_size", &Config::block_size},
      {"max_window_tokens", &Config::max_window_tokens},
      {"align_to_eot", &Config::align_to_eot},
      {"micro_batch_tokens", &Config::micro_batch_tokens},
      {"num_iterations", &Config::num_iterations},
      {"cooldown_frac", &Config::cooldown_frac},
      {"val_loss_every", &Config::val_loss_every},
      {"checkpoint_every", &Config::checkpoint_every},
      {"seed", &Config::seed},
      {"muon_lr", &Config::muon_lr},
      {"muon_momentum_start", &Config::muon_momentum_start},
      {"muon_momentum_end", &Config::muon_momentum_end},
      {"muon_momentum_warmup", &Config::muon_momentum_warmup},
      {"muon_ns_steps", &Config::muon_ns_steps},
      {"adam_head_lr", &Config::adam_head_lr},
      {"adam_embed_lr", &Config::adam_embed_lr},
      {"adam_scalar_lr", &Config::adam_scalar_lr},
      {"adam_beta1", &Config::adam_beta1},
      {"adam_beta2", &Config::adam_beta2},
      {"adam_eps", &Config::adam_eps},
      {"bucket_mb", &Config::bucket_mb},
      {"comm_thread", &Config::comm_thread},
      {"matrix_optimizer", &Config::matrix_optimizer},
      {"adam_matrix_lr", &Config::adam_matrix_lr},
      {"value_embeddings", &Config::value_embeddings},
      {"unet_skips", &Config::unet_skips},
      {"x0_mixing", &Config::x0_mixing},
      {"window_warmup", &Config::window_warmup},
      {"sync", &Config::sync},
      {"replicas", &Config::replicas},
      {"sync_every", &Config::sync_every},
      {"outer_lr", &Config::outer_lr},
      {"outer_momentum", &Config::outer_momentum},
      {"fragments", &Config::fragments},
      {"fragment_order", &Config::fragment_order},
      {"sync_delay", &Config::sync_delay},
      {"fragment_merge_alpha", &Config::fragment_merge_alpha},
      {"outer_grad_bits", &Config::outer_grad_bits},
  };
  return f;
}

std::string known_keys() {
  std::string s;
  for (const Field& f : fields()) s += (s.empty() ? "" : ", ") + std::string(f.name);
  return s;
}

const Field& find_field(const std::string& key) {
  for (const Field& f : fields()) {
    if (key == f.name) return f;
  }
  throw InputError("unknown configuration key '" + key + "'; known keys: " + known_keys());
}

constexpr std::pair<PrecisionSetting, const char*> kPrecisionSettings[] = {
    {PrecisionSetting::kAuto, "auto"},
    {PrecisionSetting::kFp32, "fp32"},
    {PrecisionSetting::kBf16, "bf16"}};
constexpr std::pair<MatrixOptimizer, const char*> kMatrixOptimizers[] = {
    {MatrixOptimizer::kMuon, "muon"}, {MatrixOptimizer::kAdam, "adam"}};
constexpr std::pair<SyncMode, const char*> kSyncModes[] = {
    {SyncMode::kDdp, "ddp"},
    {SyncMode::kDiloco, "diloco"},
    {SyncMode::kStreamingDiloco, "streaming_diloco"}};
constexpr std::pair<FragmentOrder, const char*> kFragmentOrders[] = {
    {FragmentOrder::kStrided, "strided"}, {FragmentOrder::kSequential, "sequential"}};

// The spellings of a key whose values are names (an enum), and the phrase listing them.
template <class T>
constexpr bool kIsNamedValue =
    std::is_same_v<T, PrecisionSetting> || std::is_same_v<T, MatrixOptimizer> ||
    std::is_same_v<T, SyncMode> || std::is_same_v<T, FragmentOrder>;

template <class T>
std::span<const std::pair<T, const char*>> value_names() {
  if constexpr (std::is_same_v<T, PrecisionSetting>) {
    return kPrecisionSettings;
  } else if constexpr (std::is_same_v<T, MatrixOptimizer>) {
    return kMatrixOptimizers;
  } else if constexpr (std::is_same_v<T, SyncMode>) {
    return kSyncModes;
  } else {
    return kFragmentOrders;
  }
}

template <class T>
std::string allowed_names() {
  std::string s;
  const auto names = value_names<T>();
  for (size_t i = 0; i < names.size(); ++i) {
    s.append(i == 0 ? "" : (i + 1 == names.size() ? " or " : ", "));
    s.append(1, '"').append(names[i].second).append(1, '"');
  }
  return s;
}

template <class T>
const char* name_of(T value) {
  for (auto [v, name] : value_names<T>()) {
    if (v == value) return name;
  }
  throw Error("internal: a configuration value without a name");
}

bool is_named_value_field(const FieldPtr& ptr) {
  return std::visit(
      [](auto member) {
        using T = std::remove_cvref_t<decltype(std::declval<Config&>().*member)>;
        return kIsNamedValue<T>;
      },
      ptr);
}

void assign_from_json(Config& c, const Field& f, const nlohmann::json& v) {
  auto bad = [&](const char* want) {
    return InputError("configuration key '" + std::string(f.name) + "' must be " + want + ", got " +
                      v.dump());
  };
  std::visit(
      [&](auto member) {
        using T = std::remove_reference_t<decltype(c.*member)>;
        if constexpr (std::is_same_v<T, int64_t>) {
          if (!v.is_number_integer()) throw bad("an integer");
          c.*member = v.get<int64_t>();
        } else if constexpr (std::is_same_v<T, double>) {
          if (!v.is_number()) throw bad("a number");
          c.*member = v.get<double>();
        } else if constexpr (std::is_same_v<T, bool>) {
          if (!v.is_boolean()) throw bad("true or false");
          c.*member = v.get<bool>();
        } else if constexpr (kIsNamedValue<T>) {
          const std::string allowed = allowed_names<T>();
          if (!v.is_string()) throw bad(allowed.c_str());
          for (auto [value, name] : value_names<T>()) {
            if (v.get<std::string>() == name) {
              c.*member = value;
              return;
            }
          }
          throw bad(allowed.c_str());
        } else {
          if (!v.is_array()) throw bad("a list of integers, e.g. [7]");
          std::vector<int64_t> out;
          for (const auto& e : v) {
            if (!e.is_number_integer()) throw bad("a list of integers, e.g. [7]");
            out.push_back(e.get<int64_t>());
          }
          c.*member = out;
        }
      },
      f.ptr);
}

}  // namespace

int64_t Config::sequences_per_pass(int64_t seq_len) const {
  return std::max<int64_t>(1, micro_batch_tokens / std::max<int64_t>(seq_len, 1));
}

bool Config::has_attention(int64_t layer) const {
  return std::find(attn_free_layers.begin(), attn_free_layers.end(), layer) ==
         attn_free_layers.end();
}

bool Config::is_moe_layer(int64_t layer) const {
  return num_experts > 0 &&
         std::find(moe_layers.begin(), moe_layers.end(), layer) != moe_layers.end();
}

bool Config::is_long_window(int64_t layer) const {
  if (num_layers == 12) {
    static const bool kSeed[12] = {true,  false, false, false, true,  false,
                                   false, true,  false, false, false, true};
    return kSeed[layer];
  }
  return layer % 4 == 0 || layer == num_layers - 1;
}

int64_t Config::layer_window_blocks(int64_t layer, int64_t window_blocks) const {
  return is_long_window(layer) ? window_blocks : std::max<int64_t>(1, window_blocks / 2);
}

int Config::value_embed_index(int64_t layer) const {
  if (!value_embeddings) return -1;
  if (layer < 3) return static_cast<int>(layer);
  if (layer >= num_layers - 3) return static_cast<int>(layer - (num_layers - 3));
  return -1;
}

std::vector<std::string> preset_names() {
  return {"speedrun", "cpu"};
}

Config preset(const std::string& name) {
  Config c;  // the struct defaults are the seed's record: preset "speedrun"
  if (name == "speedrun") return c;
  if (name == "cpu") {
    // Sized so the README's main job trains on the fortunes corpus (8192-token BPE, ~0.7M
    // training tokens) in under ten minutes on two cores.
    c.vocab_size = 8192;
    c.eot_id = 8191;
    c.num_layers = 6;
    c.num_heads = 2;
    c.head_dim = 128;
    c.model_dim = 256;
    c.attn_free_layers = {};
    c.fp8_head = false;
    c.train_seq_len = 512;
    c.tokens_per_step = 4096;
    c.val_seq_len = 512;
    c.max_window_tokens = 512;
    c.val_tokens = 16384;
    c.num_iterations = 250;
    c.val_loss_every = 50;
    c.muon_momentum_warmup = 100;
    // 4096 tokens per step is ~100x smaller than the seed's batch; halved Adam steps train
    // better on fortunes (60-step probe: 5.54 vs 5.57 validation loss; quartered: 5.83).
    c.adam_embed_lr = 0.3;
    c.adam_head_lr = 0.11;
    c.adam_scalar_lr = 0.02;
    return c;
  }
  std::string names;
  for (const auto& n : preset_names()) names += (names.empty() ? "" : ", ") + n;
  throw InputError("unknown preset '" + name + "'; presets: " + names +
                   " (or give a path to a .json configuration file)");
}

Config config_from_json(const nlohmann::json& j, Config base) {
  if (!j.is_object()) throw InputError("a configuration must be a JSON object");
  for (const auto& [key, value] : j.items()) {
    if (key == "preset") continue;
    assign_from_json(base, find_field(key), value);
  }
  return base;
}

Config load_config(const std::string& preset_or_file, ConfigOrigins* origins) {
  for (const auto& n : preset_names()) {
    if (n == preset_or_file) return preset(n);
  }
  if (!file_exists(preset_or_file)) return preset(preset_or_file);  // names the presets
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(read_file(preset_or_file));
  } catch (const nlohmann::json::exception& e) {
    throw InputError("configuration file '" + preset_or_file + "' is not valid JSON: " + e.what());
  }
  try {
    std::string base = j.is_object() && j.contains("preset") && j["preset"].is_string()
                           ? j["preset"].get<std::string>()
                           : "cpu";
    Config c = config_from_json(j, preset(base));
    if (origins != nullptr) {
      for (const auto& [key, value] : j.items()) {
        if (key != "preset") (*origins)[key] = "configuration file '" + preset_or_file + "'";
      }
    }
    return c;
  } catch (const InputError& e) {
    throw InputError("configuration file '" + preset_or_file + "': " + e.what());
  }
}

void set_config_value(Config& config, const std::string& assignment, ConfigOrigins* origins) {
  auto eq = assignment.find('=');
  if (eq == std::string::npos || eq == 0) {
    throw InputError("--set expects key=value, got '" + assignment + "'");
  }
  std::string key = assignment.substr(0, eq);
  std::string value = assignment.substr(eq + 1);
  const Field& f = find_field(key);
  nlohmann::json v;
  if (is_named_value_field(f.ptr)) {
    // Names are taken as written (--set precision=bf16), or as JSON when quoted.
    const bool quoted = value.size() >= 2 && value.front() == '"' && value.back() == '"';
    v = quoted ? value.substr(1, value.size() - 2) : value;
  } else {
    try {
      v = nlohmann::json::parse(value);
    } catch (const nlohmann::json::exception&) {
      throw InputError("--set " + key + ": cannot parse '" + value +
                       "' (numbers, true/false, or lists like [7] are accepted)");
    }
  }
  assign_from_json(config, f, v);
  if (origins != nullptr) (*origins)[key] = "--set " + assignment;
}

nlohmann::ordered_json config_to_json(const Config& c) {
  nlohmann::ordered_json j;
  for (const Field& f : fields()) {
    std::visit(
        [&](auto member) {
          if constexpr (kIsNamedValue<std::remove_cvref_t<decltype(c.*member)>>) {
            j[f.name] = name_of(c.*member);
          } else {
            j[f.name] = c.*member;
          }
        },
        f.ptr);
  }
  return j;
}

void validate_config(const Config& c) {
  auto fail = [](const std::string& field, const std::string& why) {
    throw InputError("invalid configuration: " + field + " " + why);
  };
  if (c.vocab_size < 2 || c.vocab_size > 65536)
    fail("vocab_size", "must be in [2, 65536] (uint16 shards)");
  if (c.num_layers < 6 || c.num_layers % 2 != 0) {
    fail("num_layers",
         "must be even and at least 6 (three value embeddings at each end, U-net skips)");
  }
  if (c.num_heads < 1) fail("num_heads", "must be at least 1");
  if (c.head_dim < 4 || c.head_dim % 4 != 0)
    fail("head_dim", "must be a positive multiple of 4 (half-truncated RoPE)");
  if (c.model_dim != c.num_heads * c.head_dim) {
    fail("model_dim", "must equal num_heads × head_dim (" +
                          std::to_string(c.num_heads * c.head_dim) +
                          ") so value embeddings match the attention's values");
  }
  for (int64_t l : c.attn_free_layers) {
    if (l < 0 || l >= c.num_layers)
      fail("attn_free_layers",
           "entry " + std::to_string(l) + " is not a layer index in [0, num_layers)");
  }
  if (c.num_experts < 0) fail("num_experts", "must be >= 0 (0: dense MLPs)");
  if (c.num_experts > 0) {
    if (c.experts_per_token < 1 || c.experts_per_token > c.num_experts) {
      fail("experts_per_token", "must be in [1, num_experts = " + std::to_string(c.num_experts) +
                                    "], got " + std::to_string(c.experts_per_token));
    }
    if (c.moe_layers.empty()) {
      fail("moe_layers",
           "names no layer although num_experts = " + std::to_string(c.num_experts) +
               "; list the blocks whose MLP becomes a mixture of experts, e.g. [1,3]");
    }
  } else if (!c.moe_layers.empty()) {
    fail("moe_layers", "needs num_experts >= 1 (set num_experts, or leave moe_layers empty)");
  }
  for (int64_t l : c.moe_layers) {
    if (l < 0 || l >= c.num_layers)
      fail("moe_layers", "entry " + std::to_string(l) + " is not a layer index in [0, num_layers)");
  }
  if (c.moe_hidden_dim < 0) fail("moe_hidden_dim", "must be >= 0 (0: 4·model_dim)");
  if (!(c.moe_aux_loss_coef >= 0)) fail("moe_aux_loss_coef", "must be >= 0");
  if (c.eot_id < 0 || c.eot_id >= c.vocab_size)
    fail("eot_id", "must be a token id below vocab_size");
  if (c.attn_scale <= 0) fail("attn_scale", "must be positive");
  if (c.logit_softcap <= 0) fail("logit_softcap", "must be positive");
  if (c.block_size < 1) fail("block_size", "must be positive");
  if (c.train_seq_len < c.block_size || c.train_seq_len % c.block_size != 0) {
    fail("train_seq_len",
         "must be a positive multiple of block_size (" + std::to_string(c.block_size) + ")");
  }
  if (c.val_seq_len < c.block_size || c.val_seq_len % c.block_size != 0) {
    fail("val_seq_len",
         "must be a positive multiple of block_size (" + std::to_string(c.block_size) + ")");
  }
  if (c.tokens_per_step < c.train_seq_len || c.tokens_per_step % c.train_seq_len != 0) {
    fail("tokens_per_step",
         "must be a positive multiple of train_seq_len (" + std::to_string(c.train_seq_len) + ")");
  }
  if (c.val_tokens < c.val_seq_len || c.val_tokens % c.val_seq_len != 0) {
    fail("val_tokens",
         "must be a positive multiple of val_seq_len (" + std::to_string(c.val_seq_len) + ")");
  }
  if (c.max_window_tokens < 1) fail("max_window_tokens", "must be positive");
  if (c.micro_batch_tokens < 1)
    fail("micro_batch_tokens", "must be positive (passes hold at least one whole sequence)");
  if (c.num_iterations < 1) fail("num_iterations", "must be at least 1");
  if (!(c.cooldown_frac >= 0 && c.cooldown_frac <= 1)) fail("cooldown_frac", "must be in [0, 1]");
  if (c.val_loss_every < 0) fail("val_loss_every", "must be >= 0 (0: only at the end)");
  if (c.checkpoint_every < 0) fail("checkpoint_every", "must be >= 0 (0: only at the end)");
  if (c.muon_ns_steps < 1) fail("muon_ns_steps", "must be at least 1");
  if (c.muon_momentum_warmup < 0) fail("muon_momentum_warmup", "must be >= 0");
  for (auto [name, v] : {std::pair{"muon_lr", c.muon_lr},
                         {"adam_head_lr", c.adam_head_lr},
                         {"adam_embed_lr", c.adam_embed_lr},
                         {"adam_scalar_lr", c.adam_scalar_lr},
                         {"adam_matrix_lr", c.adam_matrix_lr}}) {
    if (!(v >= 0)) fail(name, "must be >= 0");
  }
  for (auto [name, v] : {std::pair{"muon_momentum_start", c.muon_momentum_start},
                         {"muon_momentum_end", c.muon_momentum_end},
                         {"adam_beta1", c.adam_beta1},
                         {"adam_beta2", c.adam_beta2}}) {
    if (!(v >= 0 && v < 1)) fail(name, "must be in [0, 1)");
  }
  if (!(c.adam_eps > 0)) fail("adam_eps", "must be positive");
  if (!(c.bucket_mb > 0)) fail("bucket_mb", "must be positive (MiB of gradients per bucket)");
  if (c.replicas < 0) fail("replicas", "must be >= 0 (0: one replica per rank)");
  if (c.sync_every < 1) fail("sync_every", "must be at least 1 (inner steps between outer steps)");
  if (!(c.outer_lr > 0)) fail("outer_lr", "must be positive");
  if (!(c.outer_momentum >= 0 && c.outer_momentum < 1)) fail("outer_momentum", "must be in [0, 1)");
  if (c.fragments < 0 || c.fragments > c.num_layers) {
    fail("fragments",
         "must be in [0, num_layers] (0: one per 3 layers), got " + std::to_string(c.fragments));
  }
  if (c.sync_delay < -1) fail("sync_delay", "must be >= 0 (or -1: the mode's default)");
  if (!(c.fragment_merge_alpha == -1 ||
        (c.fragment_merge_alpha >= 0 && c.fragment_merge_alpha <= 1))) {
    fail("fragment_merge_alpha", "must be in [0, 1] (or -1: 0.5 with a delay, else 0)");
  }
  if (c.outer_grad_bits != 0 && c.outer_grad_bits != 4 && c.outer_grad_bits != 8 &&
      c.outer_grad_bits != 16 && c.outer_grad_bits != 32) {
    fail("outer_grad_bits", "must be 4, 8, 16 or 32 (or 0: the mode's default), got " +
                                std::to_string(c.outer_grad_bits));
  }
  if (c.sync == SyncMode::kDdp) {
    if (c.replicas > 1) {
      fail("replicas",
           "needs sync = \"diloco\" or \"streaming_diloco\" (with ddp all ranks are one "
           "replica)");
    }
  } else if (c.sync == SyncMode::kDiloco) {
    if (c.fragments > 1 || c.sync_delay > 0 || c.fragment_merge_alpha > 0) {
      fail("sync",
           "\"diloco\" synchronizes the whole model at once with no delay; for "
           "fragments, sync_delay or fragment_merge_alpha use sync = \"streaming_diloco\"");
    }
  } else {
    const int64_t P = c.outer_fragments();
    if (c.sync_every % P != 0) {
      fail("sync_every", "(" + std::to_string(c.sync_every) + ") must be a multiple of the " +
                             std::to_string(P) + " fragments, so they synchronize evenly spaced");
    }
    if (c.outer_sync_delay() >= c.sync_every / P) {
      fail("sync_delay", "(" + std::to_string(c.outer_sync_delay()) +
                             ") must be below sync_every / fragments (" +
                             std::to_string(c.sync_every / P) +
                             "), so one fragment lands before the next leaves");
    }
  }
}

int64_t Config::outer_fragments() const {
  if (sync != SyncMode::kStreamingDiloco) return 1;
  return fragments > 0 ? fragments : ceil_div(num_layers, 3);
}

int64_t Config::outer_sync_delay() const {
  if (sync_delay >= 0) return sync_delay;
  return sync == SyncMode::kStreamingDiloco ? 1 : 0;
}

double Config::outer_merge_alpha() const {
  if (fragment_merge_alpha >= 0) return fragment_merge_alpha;
  return outer_sync_delay() > 0 ? 0.5 : 0.0;
}

int Config::outer_bits() const {
  if (outer_grad_bits > 0) return static_cast<int>(outer_grad_bits);
  return sync == SyncMode::kStreamingDiloco ? 4 : 32;
}

Precision resolved_precision(const Config& c) {
  if (c.precision == PrecisionSetting::kFp32) return Precision::kFp32;
  if (c.precision == PrecisionSetting::kBf16) return Precision::kBf16;
  // auto: bf16 where it is faster, which is where the bf16 GEMM multiplies bf16 natively: AMX,
  // or VDPBF16PS where the autotuner measured it faster than the FMA units (AMD Zen 4: twice
  // as fast). Where it chose the FMA kernel on rounded operands (some Xeons without AMX:
  // VDPBF16PS at half the FMA rate), bf16 would only add rounding (microkernel_dispatch.cpp).
  return active_bf16_microkernel().bf16_products ? Precision::kBf16 : Precision::kFp32;
}

const char* precision_name(Precision p) {
  return p == Precision::kBf16 ? "bf16" : "fp32";
}

const char* precision_setting_name(PrecisionSetting p) {
  return name_of(p);
}

const char* matrix_optimizer_name(MatrixOptimizer m) {
  return name_of(m);
}

const char* sync_mode_name(SyncMode m) {
  return name_of(m);
}

const char* fragment_order_name(FragmentOrder o) {
  return name_of(o);
}

}  // namespace nanogpt
