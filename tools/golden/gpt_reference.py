"""Independent PyTorch reference of the modded-nanogpt "speedrun" GPT (single sequence, CPU).

Written for clarity, not speed: attention is explicit masked scores + softmax, RMSNorm is written
by hand (torch 1.13 has no F.rms_norm), and the document/sliding-window mask is a dense [T, T]
boolean matrix built from its definition. Works in whatever dtype the parameters have (the golden
generator uses float64).

Model (the project spec):
  x = x0 = rmsnorm(embed(tokens))
  for block i (U-net: outputs of the first L/2 blocks are pushed on a stack; block i >= L/2 first
  does x = x + skip_weights[i - L/2] * pop()):
      x = lambdas[0] * x + lambdas[1] * x0
      x = x + attn(rmsnorm(x), ve_i)          (unless layer i is attention-free)
      x = x + mlp(rmsnorm(x))                 mlp = c_proj(relu(c_fc(x))^2)
                                              (a mixture of experts in moe_layers: MoEMLP)
  logits = lm_head(rmsnorm(x)); z -> 30 * sigmoid(z / (7.5 * sqrt(d)))
  loss = mean cross-entropy over all padded-vocabulary classes, targets = next tokens
         (+ moe_aux_loss_coef * the sum of the MoE blocks' load-balancing losses).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
import torch.nn as nn
import torch.nn.functional as F

BLOCK_SIZE = 128                           # attention-window granularity, in tokens
RMS_EPS = torch.finfo(torch.float32).eps   # 2**-23, used even when computing in float64
QK_SCALE = 0.12                            # attention score scale (replaces 1/sqrt(head_dim))
SOFTCAP = 30.0                             # logits -> SOFTCAP * sigmoid(z / (7.5 * sqrt(d)))
VOCAB_MULTIPLE = 128


def next_multiple_of(n: int, k: int) -> int:
    return ((n + k - 1) // k) * k


@dataclass
class GPTConfig:
    vocab_size: int = 50257
    num_layers: int = 12
    num_heads: int = 6
    num_kv_heads: int = 0           # key/value heads (grouped-query attention); 0 = num_heads
    head_dim: int = 128
    model_dim: int = 768
    attn_free_layers: list = field(default_factory=lambda: [7])
    window_blocks: int = 8          # W: long layers see W blocks, short layers max(1, W // 2)
    seq_len: int = 1024
    eot_id: int = 50256
    num_experts: int = 0            # mixture of experts in moe_layers; 0 = every MLP dense
    experts_per_token: int = 2      # top-k
    moe_layers: list = field(default_factory=list)
    moe_hidden_dim: int = 0         # each expert's hidden width; 0 = 4 * model_dim
    moe_aux_loss_coef: float = 0.01

    @property
    def kv_heads(self) -> int:
        return self.num_kv_heads or self.num_heads

    @property
    def padded_vocab_size(self) -> int:
        return next_multiple_of(self.vocab_size, VOCAB_MULTIPLE)


# ----------------------------------------------------------------------------------------------
# Stateless pieces


def rms_norm(x: torch.Tensor) -> torch.Tensor:
    """x / sqrt(mean(x^2) + eps) over the last dimension; no weight."""
    return x / torch.sqrt(x.pow(2).mean(dim=-1, keepdim=True) + RMS_EPS)


def is_long_layer(i: int, num_layers: int) -> bool:
    if num_layers == 12:  # modded-nanogpt's pattern: L S S S L S S L S S S L
        return i in (0, 4, 7, 11)
    return i % 4 == 0 or i == num_layers - 1


def layer_window_blocks(i: int, num_layers: int, window_blocks: int) -> int:
    return window_blocks if is_long_layer(i, num_layers) else max(1, window_blocks // 2)


def value_embed_index(i: int, num_layers: int) -> int | None:
    """Which value embedding layer i uses: 0,1,2 for the first three and the last three layers."""
    if i < 3:
        return i
    if i >= num_layers - 3:
        return i - (num_layers - 3)
    return None


def document_ids(tokens: torch.Tensor, eot_id: int) -> torch.Tensor:
    """doc[i] = number of EOT tokens in tokens[0..i] inclusive (an EOT starts its document)."""
    return (tokens == eot_id).to(torch.int64).cumsum(0)


def attention_mask(tokens: torch.Tensor, eot_id: int, window_blocks: int) -> torch.Tensor:
    """Dense [T, T] bool mask: query i may attend to key j iff
    j <= i, doc[i] == doc[j] and i // 128 - j // 128 < window_blocks."""
    T = tokens.shape[0]
    pos = torch.arange(T)
    doc = document_ids(tokens, eot_id)
    blk = pos // BLOCK_SIZE
    causal = pos[:, None] >= pos[None, :]
    same_doc = doc[:, None] == doc[None, :]
    in_window = (blk[:, None] - blk[None, :]) < window_blocks
    return causal & same_doc & in_window


def rotary_cos_sin(seq_len: int, head_dim: int, dtype: torch.dtype):
    """Half-truncated RoPE tables [T, head_dim/2]: head_dim/4 frequencies (1/1024)^linspace(0,1)
    followed by head_dim/4 zeros. Computed in float64 from the definition, then cast."""
    quarter = head_dim // 4
    freq = (1.0 / 1024.0) ** torch.linspace(0, 1, steps=quarter, dtype=torch.float64)
    freq = torch.cat([freq, torch.zeros(quarter, dtype=torch.float64)])
    t = torch.arange(seq_len, dtype=torch.float64)
    theta = t[:, None] * freq[None, :]
    return theta.cos().to(dtype), theta.sin().to(dtype)


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x: [T, H, head_dim]; cos/sin: [T, head_dim/2]."""
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    cos, sin = cos[:, None, :], sin[:, None, :]
    y1 = x1 * cos + x2 * sin
    y2 = -x1 * sin + x2 * cos
    return torch.cat([y1, y2], dim=-1)


# ----------------------------------------------------------------------------------------------
# Modules


class CausalSelfAttention(nn.Module):
    """With kv_heads < num_heads (grouped-query attention) k and v have kv_heads heads, query
    head h reading k/v head h // (num_heads // kv_heads); the projections are then three
    tensors q_w [H*D, d], k_w [H_kv*D, d], v_w [H_kv*D, d] instead of qkv_w [3, H*D, d]."""

    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.num_heads, self.kv_heads, self.head_dim = cfg.num_heads, cfg.kv_heads, cfg.head_dim
        hdim = cfg.num_heads * cfg.head_dim
        kvdim = cfg.kv_heads * cfg.head_dim
        if self.kv_heads == self.num_heads:
            self.qkv_w = nn.Parameter(torch.empty(3, hdim, cfg.model_dim))
        else:
            self.q_w = nn.Parameter(torch.empty(hdim, cfg.model_dim))
            self.k_w = nn.Parameter(torch.empty(kvdim, cfg.model_dim))
            self.v_w = nn.Parameter(torch.empty(kvdim, cfg.model_dim))
        self.lambdas = nn.Parameter(torch.empty(2))
        self.c_proj = nn.Linear(hdim, cfg.model_dim, bias=False)

    def forward(self, x, ve, mask, cos, sin):
        T = x.shape[0]
        H, Hkv, D = self.num_heads, self.kv_heads, self.head_dim
        if Hkv == H:
            q_w, k_w, v_w = self.qkv_w[0], self.qkv_w[1], self.qkv_w[2]
        else:
            q_w, k_w, v_w = self.q_w, self.k_w, self.v_w
        q = (x @ q_w.T).view(T, H, D)
        k = (x @ k_w.T).view(T, Hkv, D)
        v = (x @ v_w.T).view(T, Hkv, D)
        q, k = rms_norm(q), rms_norm(k)                   # QK-norm, per head over head_dim
        q, k = apply_rotary(q, cos, sin), apply_rotary(k, cos, sin)
        if ve is not None:
            v = self.lambdas[0] * v + self.lambdas[1] * ve.view(T, Hkv, D)
        else:
            v = self.lambdas[0] * v
        # Each k/v head serves H // Hkv consecutive query heads: repeat them to H heads.
        k = k.repeat_interleave(H // Hkv, dim=1)
        v = v.repeat_interleave(H // Hkv, dim=1)
        q, k, v = q.transpose(0, 1), k.transpose(0, 1), v.transpose(0, 1)  # [H, T, D]
        scores = QK_SCALE * (q @ k.transpose(1, 2))                         # [H, T, T]
        scores = scores.masked_fill(~mask[None], float("-inf"))
        probs = torch.softmax(scores, dim=-1)
        y = probs @ v                                                       # [H, T, D]
        y = y.transpose(0, 1).reshape(T, H * D)
        return self.c_proj(y)


class MLP(nn.Module):
    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.c_fc = nn.Linear(cfg.model_dim, 4 * cfg.model_dim, bias=False)
        self.c_proj = nn.Linear(4 * cfg.model_dim, cfg.model_dim, bias=False)

    def forward(self, x):
        return self.c_proj(F.relu(self.c_fc(x)).square())


class StackedLinear(nn.Module):
    """The experts' weights of one layer stacked: weight [E, out, in]."""

    def __init__(self, experts: int, fan_in: int, fan_out: int):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(experts, fan_out, fan_in))


class MoEMLP(nn.Module):
    """A mixture of expert MLPs: router softmax, each token to its top-k experts with the chosen
    probabilities renormalised to sum to 1, every expert an MLP c_proj(relu(c_fc(x))^2), no
    capacity limit. Written expert by expert over index lists (no permutation kernel).
    Returns the output and the Switch/GShard load-balancing loss E * sum_e f_e * P_e (f_e: the
    fraction of the T*k assignments that chose e, a constant; P_e: the mean router probability).

    `frozen` (class-wide): when a dict, each module records its routing and ReLU patterns at its
    first call and reuses them (finite differences across the kinks; see make_model_golden.py)."""

    frozen = None

    def __init__(self, cfg: GPTConfig):
        super().__init__()
        E, d = cfg.num_experts, cfg.model_dim
        hidden = cfg.moe_hidden_dim or 4 * d
        self.k = cfg.experts_per_token
        self.router = nn.Linear(d, E, bias=False)
        self.experts = nn.Module()
        self.experts.c_fc = StackedLinear(E, d, hidden)
        self.experts.c_proj = StackedLinear(E, hidden, d)

    def forward(self, x):
        T, E = x.shape[0], self.router.weight.shape[0]
        probs = torch.softmax(self.router(x), dim=-1)
        memo = None if MoEMLP.frozen is None else MoEMLP.frozen.setdefault(id(self), {})
        if memo is not None and "chosen" in memo:
            chosen = memo["chosen"]
        else:
            chosen = probs.topk(self.k, dim=-1).indices           # [T, k]
            if memo is not None:
                memo["chosen"] = chosen
        picked = probs.gather(1, chosen)
        gates = picked / picked.sum(dim=-1, keepdim=True)
        out = torch.zeros_like(x)
        for e in range(E):
            token, slot = (chosen == e).nonzero(as_tuple=True)
            if token.numel() == 0:
                continue
            u = x[token] @ self.experts.c_fc.weight[e].T
            if memo is not None:
                mask = memo.setdefault(e, (u > 0).to(u.dtype))
                h = (u * mask).square()
            else:
                h = F.relu(u).square()
            y = h @ self.experts.c_proj.weight[e].T
            out = out.index_add(0, token, gates[token, slot, None] * y)
        f = F.one_hot(chosen, E).to(x.dtype).sum(dim=(0, 1)) / (T * self.k)
        aux = E * (f * probs.mean(dim=0)).sum()
        return out, aux


class Block(nn.Module):
    def __init__(self, cfg: GPTConfig, layer_idx: int):
        super().__init__()
        self.attn = None if layer_idx in cfg.attn_free_layers else CausalSelfAttention(cfg)
        self.moe = cfg.num_experts > 0 and layer_idx in cfg.moe_layers
        self.mlp = MoEMLP(cfg) if self.moe else MLP(cfg)
        self.lambdas = nn.Parameter(torch.empty(2))

    def forward(self, x, x0, ve, mask, cos, sin):
        """Returns the block's output and its load-balancing loss (None for a dense MLP)."""
        x = self.lambdas[0] * x + self.lambdas[1] * x0
        if self.attn is not None:
            x = x + self.attn(rms_norm(x), ve, mask, cos, sin)
        if self.moe:
            y, aux = self.mlp(rms_norm(x))
            return x + y, aux
        return x + self.mlp(rms_norm(x)), None


class GPT(nn.Module):
    def __init__(self, cfg: GPTConfig):
        super().__init__()
        assert cfg.num_layers % 2 == 0 and cfg.num_layers >= 6
        assert cfg.head_dim % 4 == 0
        assert cfg.num_heads % cfg.kv_heads == 0
        self.config = cfg
        V, Vp, d = cfg.vocab_size, cfg.padded_vocab_size, cfg.model_dim
        self.embed = nn.Embedding(V, d)
        # Value embeddings are mixed into v: kv_heads * head_dim wide (d without GQA).
        kvdim = cfg.kv_heads * cfg.head_dim
        self.value_embeds = nn.ModuleList([nn.Embedding(V, kvdim) for _ in range(3)])
        self.blocks = nn.ModuleList([Block(cfg, i) for i in range(cfg.num_layers)])
        self.lm_head = nn.Linear(d, Vp, bias=False)
        self.skip_weights = nn.Parameter(torch.empty(cfg.num_layers // 2))

    def forward(self, input_seq: torch.Tensor, target_seq: torch.Tensor,
                window_blocks: int | None = None, reduction: str = "mean",
                record: dict | None = None) -> torch.Tensor:
        """input_seq, target_seq: int64 [T]. Returns the cross-entropy loss (mean over T
        positions by default; with MoE blocks, plus moe_aux_loss_coef * their load-balancing
        losses). If `record` is a dict, intermediate activations are stored in it (and, with MoE
        blocks, "lm_loss" and "moe_aux_loss", the sum of the blocks' balancing losses)."""
        cfg = self.config
        L = cfg.num_layers
        W = cfg.window_blocks if window_blocks is None else window_blocks
        T = input_seq.shape[0]
        dtype = self.embed.weight.dtype

        masks = {}
        for w in sorted({layer_window_blocks(i, L, W) for i in range(L)}):
            masks[w] = attention_mask(input_seq, cfg.eot_id, w)
        cos, sin = rotary_cos_sin(T, cfg.head_dim, dtype)
        ve_all = [emb(input_seq) for emb in self.value_embeds]

        x = x0 = rms_norm(self.embed(input_seq))
        if record is not None:
            record["x0"] = x0.detach().clone()
        skips = []
        aux_losses = []
        n = L // 2
        for i, block in enumerate(self.blocks):
            if i >= n:
                x = x + self.skip_weights[i - n] * skips.pop()
            vi = value_embed_index(i, L)
            ve = ve_all[vi] if vi is not None else None
            x, aux = block(x, x0, ve, masks[layer_window_blocks(i, L, W)], cos, sin)
            if aux is not None:
                aux_losses.append(aux)
            if i < n:
                skips.append(x)
            if record is not None:
                record[f"block_out.{i}"] = x.detach().clone()
        x = rms_norm(x)
        logits = self.lm_head(x)
        logits = SOFTCAP * torch.sigmoid(logits / (7.5 * math.sqrt(cfg.model_dim)))
        if record is not None:
            record["final_norm"] = x.detach().clone()
            record["logits_capped"] = logits.detach().clone()
        loss = F.cross_entropy(logits, target_seq, reduction=reduction)
        if not aux_losses:
            return loss
        aux_total = sum(aux_losses)
        if record is not None:
            record["lm_loss"] = loss.detach().clone()
            record["moe_aux_loss"] = aux_total.detach().clone()
        if reduction != "mean":
            return loss
        return loss + cfg.moe_aux_loss_coef * aux_total
