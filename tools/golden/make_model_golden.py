#!/usr/bin/python3
"""Writes tests/data/golden_model_small.safetensors, golden_model_gqa.safetensors and
golden_model_moe.safetensors: parameters, tokens, loss, gradients and a few activations of a small
GPT (gpt_reference.py), the second with grouped-query attention (4 query heads sharing 2 key/value
heads), the third with mixture-of-experts MLPs in two blocks (its "loss" the language loss,
"moe_aux_loss" the blocks' balancing losses summed, the gradients those of the whole objective),
computed in float64 from float32 parameters.

Usage: /usr/bin/python3 tools/golden/make_model_golden.py [output directory]

Runs sanity checks first (finite differences vs autograd, mask sensitivity, mask equivalence with
modded-nanogpt's block-sparse construction) and fails loudly if any of them does not hold.
"""
import json
import math
import os
import sys
from dataclasses import asdict

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpt_reference  # noqa: E402
from gpt_reference import (BLOCK_SIZE, GPT, GPTConfig, attention_mask, document_ids,  # noqa: E402
                           layer_window_blocks)
from safetensors_io import load_file, save_file  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEFAULT_DIR = os.path.join(REPO, "tests", "data")

CONFIG = GPTConfig(vocab_size=300, num_layers=8, num_heads=2, head_dim=16, model_dim=32,
                   attn_free_layers=[4], window_blocks=2, seq_len=384, eot_id=299)
# Grouped-query attention: query heads 0, 1 read key/value head 0, heads 2, 3 head 1.
GQA_CONFIG = GPTConfig(vocab_size=300, num_layers=8, num_heads=4, num_kv_heads=2, head_dim=8,
                       model_dim=32, attn_free_layers=[4], window_blocks=2, seq_len=384,
                       eot_id=299)
# Mixture of experts in blocks 1 (with attention) and 6: 4 experts of width 48 (not 4 * d), top-2;
# a balancing coefficient 10x the default so its gradient is a visible part of the routers'.
MOE_CONFIG = GPTConfig(vocab_size=300, num_layers=8, num_heads=2, head_dim=16, model_dim=32,
                       attn_free_layers=[4], window_blocks=2, seq_len=384, eot_id=299,
                       num_experts=4, experts_per_token=2, moe_layers=[1, 6], moe_hidden_dim=48,
                       moe_aux_loss_coef=0.1)
# (file name, configuration, the projections the finite differences check)
GOLDEN_FILES = [
    ("golden_model_small.safetensors", CONFIG, ["blocks.0.attn.qkv_w", "blocks.7.attn.qkv_w"]),
    ("golden_model_gqa.safetensors", GQA_CONFIG,
     ["blocks.0.attn.q_w", "blocks.2.attn.k_w", "blocks.7.attn.v_w"]),
    ("golden_model_moe.safetensors", MOE_CONFIG,
     ["blocks.0.attn.qkv_w", "blocks.1.mlp.router.weight", "blocks.6.mlp.router.weight",
      "blocks.1.mlp.experts.c_fc.weight", "blocks.6.mlp.experts.c_proj.weight"]),
]
# Irregular EOT positions in tokens[0..T]: one at 0, an adjacent pair (37, 38), and a document
# (101..340) that spans all three 128-token blocks, so the long window (2 blocks) truncates it.
EOT_POSITIONS = [0, 37, 38, 101, 341, 372]
SEED = 20240531


def make_tokens(cfg: GPTConfig, gen: torch.Generator) -> torch.Tensor:
    tokens = torch.randint(0, cfg.eot_id, (cfg.seq_len + 1,), generator=gen, dtype=torch.int64)
    assert cfg.eot_id == cfg.vocab_size - 1  # so randint above never draws the EOT
    tokens[EOT_POSITIONS] = cfg.eot_id
    return tokens


def init_params(model: GPT, gen: torch.Generator) -> None:
    """Seeded random float32 values everywhere (deliberately NOT the real init, which zeroes the
    output projections and lm_head and would make the gradient check weak)."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name == "embed.weight" or name.startswith("value_embeds."):
                p.copy_(torch.randn(p.shape, generator=gen))
            elif name.endswith("attn.lambdas"):
                p.copy_(0.5 + 0.3 * (2 * torch.rand(p.shape, generator=gen) - 1))
            elif name.endswith(".lambdas"):  # block lambdas
                p.copy_(torch.tensor([1.0, 0.0]) + 0.3 * (2 * torch.rand(p.shape, generator=gen) - 1))
            elif name == "skip_weights":
                p.copy_(1.0 + 0.3 * (2 * torch.rand(p.shape, generator=gen) - 1))
            else:  # linear weights: uniform(-bound, bound), bound = sqrt(3) * 0.5 * fan_in^-0.5
                assert p.ndim >= 2, name
                bound = math.sqrt(3) * 0.5 * p.shape[-1] ** -0.5
                p.copy_((2 * torch.rand(p.shape, generator=gen) - 1) * bound)
            assert p.dtype == torch.float32
            assert bool((p != 0).all()), f"{name} has an exact zero"


def expected_param_names(cfg: GPTConfig) -> list:
    names = ["embed.weight"] + [f"value_embeds.{i}.weight" for i in range(3)]
    for i in range(cfg.num_layers):
        if i not in cfg.attn_free_layers:
            if cfg.kv_heads == cfg.num_heads:
                names += [f"blocks.{i}.attn.qkv_w"]
            else:  # one tensor each, consecutive
                names += [f"blocks.{i}.attn.q_w", f"blocks.{i}.attn.k_w", f"blocks.{i}.attn.v_w"]
            names += [f"blocks.{i}.attn.lambdas", f"blocks.{i}.attn.c_proj.weight"]
        if cfg.num_experts and i in cfg.moe_layers:
            names += [f"blocks.{i}.mlp.router.weight", f"blocks.{i}.mlp.experts.c_fc.weight",
                      f"blocks.{i}.mlp.experts.c_proj.weight"]
        else:
            names += [f"blocks.{i}.mlp.c_fc.weight", f"blocks.{i}.mlp.c_proj.weight"]
        names += [f"blocks.{i}.lambdas"]
    return names + ["lm_head.weight", "skip_weights"]


def seed_blockmask_dense(tokens: torch.Tensor, eot_id: int, window_blocks: int) -> torch.Tensor:
    """Dense mask implied by modded-nanogpt's create_blockmasks + BlockMask.from_kv_blocks +
    document_causal mask_mod (re-implemented from the seed), for comparison with the spec's
    'block(i) - block(j) < W' definition."""
    T = tokens.shape[0]
    docs = document_ids(tokens, eot_id)
    nb = T // BLOCK_SIZE
    bi = torch.arange(nb)
    causal_any = bi[:, None] >= bi
    causal_all = bi[:, None] > bi
    lo = docs.view(-1, BLOCK_SIZE)[:, 0]
    hi = docs.view(-1, BLOCK_SIZE)[:, -1]
    doc_any = (lo[:, None] <= hi) & (hi[:, None] >= lo)
    doc_all = (lo[:, None] == hi) & (hi[:, None] == lo)
    any_ = causal_any & doc_any
    all_ = causal_all & doc_all

    def dense_to_ordered(dense):
        num = dense.sum(dim=-1)
        idx = dense.to(torch.int32).argsort(dim=-1, descending=False, stable=True).flip(-1)
        return num, idx

    p_num, p_idx = dense_to_ordered(any_ & ~all_)
    f_num, f_idx = dense_to_ordered(all_)
    p_num = torch.clamp_max(p_num, torch.clamp_min(window_blocks - f_num, 1))
    f_num = torch.clamp_max(f_num, window_blocks - 1)
    pos = torch.arange(T)
    mask_mod = (pos[:, None] >= pos[None, :]) & (docs[:, None] == docs[None, :])
    dense = torch.zeros(T, T, dtype=torch.bool)
    for qb in range(nb):
        rows = slice(qb * BLOCK_SIZE, (qb + 1) * BLOCK_SIZE)
        for kb in p_idx[qb, :max(int(p_num[qb]), 0)].tolist():
            cols = slice(kb * BLOCK_SIZE, (kb + 1) * BLOCK_SIZE)
            dense[rows, cols] = mask_mod[rows, cols]
        for kb in f_idx[qb, :max(int(f_num[qb]), 0)].tolist():
            cols = slice(kb * BLOCK_SIZE, (kb + 1) * BLOCK_SIZE)
            assert bool(mask_mod[rows, cols].all())
            dense[rows, cols] = True
    return dense


class FrozenReluPattern:
    """Within this context every MLP applies the ReLU on/off pattern recorded by the first forward
    pass made inside it, instead of recomputing it. relu(u)^2 is C^1 but its second derivative
    jumps at u = 0, and among the ~400k ReLU units some pre-activations cross zero inside almost
    any finite-difference stencil, which spoils the difference quotient at the 1e-4 level. The
    frozen-pattern function (m * u)^2 has the same value and first derivative at the base point
    (2 relu(u) u'), but is smooth, so the 5-point stencil is accurate to ~h^4. Mixture-of-experts
    blocks likewise keep their first call's top-k routing (piecewise constant in the weights: a
    step could move a token to another expert) and their experts' ReLU patterns."""

    def __enter__(self):
        self.masks = {}
        self.original = gpt_reference.MLP.forward
        masks = self.masks

        def forward(mlp, x):
            u = mlp.c_fc(x)
            if id(mlp) not in masks:
                masks[id(mlp)] = (u > 0).to(u.dtype)
            return mlp.c_proj((u * masks[id(mlp)]).square())

        gpt_reference.MLP.forward = forward
        gpt_reference.MoEMLP.frozen = {}
        return self

    def __exit__(self, *exc):
        gpt_reference.MLP.forward = self.original
        gpt_reference.MoEMLP.frozen = None
        return False


def finite_difference_checks(model, inp, tgt, gen, projections) -> float:
    """5-point central differences (float64, frozen ReLU pattern) vs autograd on random entries
    of several parameters. Entries whose gradient is below 1e-6 in magnitude are re-drawn: there
    the float64 round-off of the loss (~1e-15 * 6 / h) is no longer negligible against 1e-6."""
    params = dict(model.named_parameters())
    present = sorted(set(inp.tolist()))
    checks = ["embed.weight", "value_embeds.1.weight", "value_embeds.2.weight",
              "blocks.1.attn.lambdas", "blocks.3.attn.c_proj.weight",
              "blocks.4.mlp.c_fc.weight", "blocks.5.mlp.c_proj.weight", "blocks.6.lambdas",
              "lm_head.weight", "skip_weights"] + projections
    h = 1e-3
    worst = 0.0
    with torch.no_grad(), FrozenReluPattern():
        base = model(inp, tgt).item()  # records the ReLU pattern at the base point
        for name in checks:
            p = params[name]
            done, seen = 0, set()
            while done < 3 and len(seen) < p.numel():
                if name.startswith(("embed", "value_embeds")):  # a row of a token that occurs
                    row = present[int(torch.randint(len(present), (1,), generator=gen))]
                    col = int(torch.randint(p.shape[1], (1,), generator=gen))
                    idx = (row, col)
                else:
                    flat = int(torch.randint(p.numel(), (1,), generator=gen))
                    idx = tuple(int(i) for i in np.unravel_index(flat, tuple(p.shape)))
                ad = p.grad[idx].item()
                if idx in seen or abs(ad) < 1e-6:
                    if len(seen) >= p.numel():
                        break
                    seen.add(idx)
                    continue
                seen.add(idx)
                orig = p[idx].item()
                vals = {}
                for k in (-2, -1, 1, 2):
                    p[idx] = orig + k * h
                    vals[k] = model(inp, tgt).item()
                p[idx] = orig
                assert model(inp, tgt).item() == base
                fd = (vals[-2] - 8 * vals[-1] + 8 * vals[1] - vals[2]) / (12 * h)
                rel = abs(fd - ad) / abs(ad)
                worst = max(worst, rel)
                done += 1
                print(f"  fd  {name:28s} {str(idx):12s} autograd {ad:+.12e}  fd {fd:+.12e}  rel {rel:.1e}")
                assert rel < 1e-6, f"finite-difference mismatch for {name}{idx}: rel {rel}"
            assert done > 0, name
    return worst


def make_golden(cfg: GPTConfig, out_path: str, projections: list) -> None:
    print(f"== {out_path}")
    T, L = cfg.seq_len, cfg.num_layers
    gen = torch.Generator().manual_seed(SEED)

    tokens = make_tokens(cfg, gen)
    inp, tgt = tokens[:T], tokens[1:]
    eots = (tokens == cfg.eot_id).nonzero().flatten().tolist()
    assert eots == EOT_POSITIONS and len(eots) >= 5 and eots[0] == 0
    assert any(b - a == 1 for a, b in zip(eots, eots[1:]))

    model = GPT(cfg)
    names = [n for n, _ in model.named_parameters()]
    assert sorted(names) == sorted(expected_param_names(cfg)), names
    init_params(model, gen)
    params32 = {n: p.detach().clone() for n, p in model.named_parameters()}
    model = model.double()  # exact: every float32 value is representable in float64

    # ---- golden forward / backward (float64)
    record = {}
    loss = model(inp, tgt, record=record)
    model.zero_grad(set_to_none=True)
    loss.backward()
    loss_value = loss.item()
    grads = {n: p.grad.detach().clone() for n, p in model.named_parameters()}
    print(f"loss = {loss_value!r}  (ln(V_pad) = {math.log(cfg.padded_vocab_size):.6f})")

    # ---- sanity checks
    assert math.isfinite(loss_value)
    assert abs(loss_value - math.log(cfg.padded_vocab_size)) < 1.0, loss_value
    for n, g in grads.items():
        assert bool(torch.isfinite(g).all()), n
        if not n.startswith(("embed", "value_embeds")):
            assert bool((g != 0).any()), f"gradient of {n} is identically zero"

    print("mask equivalence with the seed's block-sparse construction:")
    for w in (1, 2, 3, 4):
        for wl in (w, max(1, w // 2)):
            spec = attention_mask(inp, cfg.eot_id, wl)
            seed = seed_blockmask_dense(inp, cfg.eot_id, wl)
            assert torch.equal(spec, seed), f"mask mismatch for window {wl}"
        print(f"  W={w}: long/short masks identical")
    print("  windows per layer:", [layer_window_blocks(i, L, cfg.window_blocks) for i in range(L)])

    def variant(tok=None, window_blocks=None, eot_id=None):
        """Loss and final activations of a modified run (the parameters are unchanged)."""
        tok = tokens if tok is None else tok
        saved = model.config.eot_id
        if eot_id is not None:
            model.config.eot_id = eot_id
        rec = {}
        with torch.no_grad():
            other = model(tok[:T], tok[1:], window_blocks=window_blocks, record=rec).item()
        model.config.eot_id = saved
        rel = abs(other - loss_value) / loss_value
        act = float((rec["final_norm"] - record["final_norm"]).abs().max())
        return other, rel, act

    for label, kwargs in [("window_blocks=1", dict(window_blocks=1)),
                          ("window_blocks=3", dict(window_blocks=3)),
                          ("no document masking", dict(eot_id=-1))]:
        other, rel, act = variant(**kwargs)
        print(f"  {label}: loss {other!r} (rel change {rel:.2e}; max |d final_norm| {act:.2e})")
        assert rel > 1e-6 and act > 1e-2
    moved = tokens.clone()
    moved[[341, 343]] = moved[[343, 341]]  # move the EOT at 341 two places later
    other, rel, act = variant(tok=moved)
    print(f"  EOT moved 341 -> 343: loss {other!r} (rel change {rel:.2e}; max |d final_norm| {act:.2e})")
    assert rel > 1e-6 and act > 1e-2

    with torch.no_grad():
        # Locality: changing the input token at 200 (document 101..340) must leave the per-position
        # losses before 200 and in later documents bit-identical, and change those in 200..340.
        base = model(inp, tgt, reduction="none")
        changed = inp.clone()
        changed[200] = (changed[200] + 1) % cfg.eot_id
        pert = model(changed, tgt, reduction="none")
        diff = (pert - base).abs()
        assert float(diff[:200].max()) == 0.0 and float(diff[341:].max()) == 0.0
        assert bool((diff[200:341] > 0).all())
        print("  locality: perturbing token 200 changes exactly positions 200..340")

    # How close a float32 evaluation gets (guidance for C++ tolerances).
    m32 = GPT(cfg)
    m32.load_state_dict(params32)
    rec32 = {}
    l32 = m32(inp, tgt, record=rec32)
    l32.backward()
    g32_err = max(float((dict(m32.named_parameters())[n].grad.double() - g).abs().max()
                        / g.abs().max()) for n, g in grads.items())
    a32_err = max(float((rec32[k].double() - record[k]).abs().max()) for k in record)
    print(f"  float32 evaluation: loss {l32.item()!r} (abs diff {abs(l32.item() - loss_value):.2e}),"
          f" max |activation error| {a32_err:.2e}, max grad error / max|grad| per tensor {g32_err:.2e}")

    print("finite differences (float64, 5-point stencil, h=1e-3, frozen ReLU pattern):")
    fd_gen = torch.Generator().manual_seed(SEED + 1)
    model.zero_grad(set_to_none=True)
    model(inp, tgt).backward()  # identical to `grads`; recomputed so p.grad is populated
    worst = finite_difference_checks(model, inp, tgt, fd_gen, projections)
    print(f"  worst relative error {worst:.2e}")
    for n, p in model.named_parameters():  # the checks must have restored every parameter
        assert torch.equal(p.detach(), params32[n].double()), n

    # ---- write
    tensors = {}
    for n in names:
        tensors[f"param/{n}"] = params32[n].numpy()
        tensors[f"grad/{n}"] = grads[n].float().numpy()
    tensors["tokens"] = tokens.to(torch.int32).numpy()
    if "lm_loss" in record:  # the language loss alone, as the C++ model returns it
        tensors["loss"] = np.array([record["lm_loss"].item()], dtype=np.float64)
        tensors["moe_aux_loss"] = np.array([record["moe_aux_loss"].item()], dtype=np.float64)
    else:
        tensors["loss"] = np.array([loss_value], dtype=np.float64)
    tensors["act/x0"] = record["x0"].float().numpy()
    for i in range(L):
        tensors[f"act/block_out.{i}"] = record[f"block_out.{i}"].float().numpy()
    tensors["act/final_norm"] = record["final_norm"].float().numpy()
    tensors["act/logits_capped"] = record["logits_capped"][:4].float().numpy()
    keys = ["vocab_size", "num_layers", "num_heads", "head_dim", "model_dim", "attn_free_layers",
            "window_blocks", "seq_len", "eot_id"]
    if cfg.num_kv_heads:  # only where set, so the base model's file stays as it was
        keys.insert(3, "num_kv_heads")
    if cfg.num_experts:
        keys += ["num_experts", "experts_per_token", "moe_layers", "moe_hidden_dim",
                 "moe_aux_loss_coef"]
    config_json = json.dumps({k: asdict(cfg)[k] for k in keys}, separators=(",", ":"))
    metadata = {"config": config_json,
                "generator": f"tools/golden/make_model_golden.py torch {torch.__version__}"}
    save_file(tensors, out_path, metadata)

    back, meta = load_file(out_path)
    assert meta == metadata and sorted(back) == sorted(tensors)
    for k, v in tensors.items():
        assert back[k].dtype == v.dtype and np.array_equal(back[k], v), k
    size = os.path.getsize(out_path)
    assert size < 2 * 1024 * 1024, size
    print(f"wrote {out_path} ({size} bytes, {len(tensors)} tensors)")


def main():
    out_dir = sys.argv[1] if len(sys.argv) > 1 else DEFAULT_DIR
    torch.set_num_threads(1)
    for file_name, cfg, projections in GOLDEN_FILES:
        make_golden(cfg, os.path.join(out_dir, file_name), projections)


if __name__ == "__main__":
    main()
