#!/usr/bin/python3
"""One training step of our GPT in PyTorch, timed: the peer `nanogpt bench train` is compared with.

Usage (Debian's python3-torch; run with /usr/bin/python3):
  bench/pytorch_train_step.py [--preset cpu|speedrun] [--set key=value ...] [--nanogpt PATH]
                              [--mode fp32|bf16|both] [--steps 5] [--warmup 1] [--threads 2]
                              [--window W] [--micro-batch N] [--ns-dtype bf16|fp32]
                              [--omp-wait-policy auto|active|passive|default] [--check]
                              [--ddp-ranks N [--threads-per-rank 1]]

The configuration is the preset plus --set overrides, under the names of `nanogpt train
--print-config`; with --nanogpt the binary resolves it, so both sides are certain to train the
same shapes. A step is what the seed's training loop does: tokens_per_step / train_seq_len
sequences forward and backward (grouped into micro-batches of --micro-batch sequences, the
gradient accumulated), then Muon on the blocks' matrices (Newton-Schulz in bf16, as the seed)
and Adam on embeddings, head and scalars, then zero_grad. Inputs are random tokens laid out as
`nanogpt bench train` makes them: every sequence starts with EOT and has no other, so the
document mask is the causal one.

Written as a competent PyTorch 1.13 user would on a CPU: batched [B, T] tensors, one fused qkv
matmul, no Python loop over tokens or heads. torch 1.13 has neither scaled_dot_product_attention
nor flex attention, so attention is explicit masked scores (causal & same document & sliding
window) and softmax. Modes: fp32, and bf16 via torch.autocast('cpu', dtype=torch.bfloat16) (the
head's logits cast to fp32 before the soft-cap, as the seed does); --mode both runs each in its
own process and reports the better.

Prints one JSON line per mode (median step time after --warmup untimed steps, tokens/s, FLOP
rates) and, for --mode both, a summary line. FLOPs are counted as src/model/flop_count.hpp does
(model_flops: linear, attention over the visible pairs, lm head, forward and backward) plus
Newton-Schulz as this script multiplies it (full products, not block-triangular).

--ddp-ranks N trains data-parallel with torch.nn.parallel.DistributedDataParallel: N processes
(torch.multiprocessing.spawn, gloo backend on 127.0.0.1), --threads-per-rank threads each
(default 1), rank r taking sequences [r·S/N, (r+1)·S/N) of the S sequences of the global batch
(tokens_per_step stays global). Micro-batches but the last run under DDP's no_sync(), so the
gradients are all-reduced once per step, in DDP's buckets (25 MB) overlapped with the backward.
Muon and Adam then run on every rank, each on the all-reduced gradients, exactly as the
single-process step: plain DDP replicates the optimizer (no distributed Muon, no sharded Adam).
Rank 0 prints the JSON line, with "ranks" and tokens/s of the global batch; the step time is the
slowest rank's.

--check instead compares this model's loss and gradients with tools/golden/gpt_reference.py
(the independent float64 reference the golden tests use) on a small configuration.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import resource
import statistics
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# The presets of src/model/config.cpp, for when no binary is at hand to print them. Only the
# keys this script uses.
_SPEEDRUN = {
    "vocab_size": 50261, "num_layers": 12, "num_heads": 6, "head_dim": 128, "model_dim": 768,
    "attn_free_layers": [7], "eot_id": 50256, "attn_scale": 0.12, "logit_softcap": 30.0,
    "train_seq_len": 48 * 1024, "tokens_per_step": 8 * 48 * 1024, "block_size": 128,
    "muon_lr": 0.05, "muon_momentum_end": 0.95, "muon_ns_steps": 5, "adam_head_lr": 0.22,
    "adam_embed_lr": 0.6, "adam_scalar_lr": 0.04, "adam_beta1": 0.8, "adam_beta2": 0.95,
    "adam_eps": 1e-10, "seed": 0,
}
PRESETS = {
    "speedrun": _SPEEDRUN,
    "cpu": dict(_SPEEDRUN, vocab_size=8192, eot_id=8191, num_layers=6, num_heads=2, head_dim=128,
                model_dim=256, attn_free_layers=[], train_seq_len=512, tokens_per_step=4096,
                adam_embed_lr=0.3, adam_head_lr=0.11, adam_scalar_lr=0.02),
}
RMS_EPS = 2.0 ** -23  # torch.finfo(torch.float32).eps, as the seed's F.rms_norm uses
NS_COEFFS = (3.4445, -4.7750, 2.0315)


def parse_set(cfg: dict, assignment: str) -> None:
    key, eq, value = assignment.partition("=")
    if not eq or key not in cfg:
        raise SystemExit(f"--set {assignment!r}: expected key=value with a key among "
                         f"{', '.join(sorted(cfg))}")
    try:
        cfg[key] = json.loads(value)
    except json.JSONDecodeError:
        cfg[key] = value


def resolve_config(args) -> dict:
    if args.nanogpt:
        cmd = [args.nanogpt, "train", "--config", args.preset, "--print-config"]
        for s in args.set:
            cmd += ["--set", s]
        out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
        return json.loads(out)
    if args.preset not in PRESETS:
        raise SystemExit(f"unknown preset {args.preset!r} (without --nanogpt: "
                         f"{', '.join(PRESETS)})")
    cfg = dict(PRESETS[args.preset])
    for s in args.set:
        parse_set(cfg, s)
    return cfg


# ----------------------------------------------------------------------------------------------
# FLOPs, as src/model/flop_count.cpp counts them


def is_long_window(layer: int, num_layers: int) -> bool:
    if num_layers == 12:  # the seed's L S S S L S S L S S S L
        return layer in (0, 4, 7, 11)
    return layer % 4 == 0 or layer == num_layers - 1


def layer_window(cfg: dict, layer: int, window: int) -> int:
    if layer in cfg["attn_free_layers"]:
        return 0
    return window if is_long_window(layer, cfg["num_layers"]) else max(1, window // 2)


def attention_pairs(T: int, window: int, block: int) -> int:
    pairs = 0
    for b0 in range(0, T, block):
        b = b0 // block
        first_key = max(0, (b - window + 1) * block)
        n = min(T, b0 + block) - b0
        pairs += n * (b0 - first_key + 1) + n * (n - 1) // 2
    return pairs


def vocab_padded(cfg: dict) -> int:
    return (cfg["vocab_size"] + 127) // 128 * 128


def model_flops_per_step(cfg: dict, window: int) -> float:
    """Forward + backward of every sequence of a step, no recomputation, no optimizer."""
    T, d = cfg["train_seq_len"], cfg["model_dim"]
    hd = cfg["num_heads"] * cfg["head_dim"]
    fwd = 0.0
    for i in range(cfg["num_layers"]):
        fwd += 2 * T * (d * 4 * d + 4 * d * d)
        w = layer_window(cfg, i, window)
        if w:
            fwd += 2 * T * (d * 3 * hd + hd * d) + 4 * hd * attention_pairs(T, w, cfg["block_size"])
    fwd += 2 * T * vocab_padded(cfg) * d
    return 3 * fwd * (cfg["tokens_per_step"] // T)


def newton_schulz_flops(cfg: dict) -> float:
    """As this script's newton_schulz5 multiplies: X·Xᵀ, A·A and B·X in full."""
    d, hd, s = cfg["model_dim"], cfg["num_heads"] * cfg["head_dim"], cfg["muon_ns_steps"]

    def ns(rows, cols):
        k, n = min(rows, cols), max(rows, cols)
        return s * (2 * k * k * n + 2 * k * k * k + 2 * k * k * n)

    total = 0.0
    for i in range(cfg["num_layers"]):
        if i not in cfg["attn_free_layers"]:
            total += 3 * ns(hd, d) + ns(d, hd)
        total += ns(4 * d, d) + ns(d, 4 * d)
    return total


# ----------------------------------------------------------------------------------------------
# The model


def build(torch, cfg: dict):
    """Returns the GPT module class, the optimizer step and helpers, bound to this torch."""
    nn, F = torch.nn, torch.nn.functional
    L, H, D, d = cfg["num_layers"], cfg["num_heads"], cfg["head_dim"], cfg["model_dim"]
    V, Vp, HD = cfg["vocab_size"], vocab_padded(cfg), cfg["num_heads"] * cfg["head_dim"]

    def rms_norm(x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + RMS_EPS)

    def value_embed_index(i):
        return i if i < 3 else (i - (L - 3) if i >= L - 3 else None)

    class Attention(nn.Module):
        def __init__(self):
            super().__init__()
            # Named as tools/golden/gpt_reference.py names them, so --check can load one
            # model's state into the other.
            self.qkv_w = nn.Parameter(torch.empty(3, HD, d))
            self.lambdas = nn.Parameter(torch.tensor([0.5, 0.5]))
            self.c_proj = nn.Linear(HD, d, bias=False)

        def forward(self, x, ve, mask, cos, sin):
            B, T, _ = x.shape
            qkv = F.linear(x, self.qkv_w.flatten(0, 1)).view(B, T, 3 * H, D)
            q, k, v = qkv.split(H, dim=2)  # [B, T, H, D]
            q, k = rms_norm(q), rms_norm(k)
            q, k = rotary(q, cos, sin), rotary(k, cos, sin)
            v = self.lambdas[0] * v
            if ve is not None:
                v = v + self.lambdas[1] * ve.view(B, T, H, D)
            q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)  # [B, H, T, D]
            scores = (cfg["attn_scale"] * q) @ k.transpose(-2, -1)            # [B, H, T, T]
            probs = scores.masked_fill(~mask, float("-inf")).softmax(dim=-1)
            y = (probs @ v).transpose(1, 2).reshape(B, T, HD)
            return self.c_proj(y)

    class MLP(nn.Module):
        def __init__(self):
            super().__init__()
            self.c_fc = nn.Linear(d, 4 * d, bias=False)
            self.c_proj = nn.Linear(4 * d, d, bias=False)

        def forward(self, x):
            return self.c_proj(F.relu(self.c_fc(x)).square())

    class Block(nn.Module):
        def __init__(self, i):
            super().__init__()
            self.attn = None if i in cfg["attn_free_layers"] else Attention()
            self.mlp = MLP()
            self.lambdas = nn.Parameter(torch.tensor([1.0, 0.0]))

        def forward(self, x, x0, ve, mask, cos, sin):
            x = self.lambdas[0] * x + self.lambdas[1] * x0
            if self.attn is not None:
                x = x + self.attn(rms_norm(x), ve, mask, cos, sin)
            return x + self.mlp(rms_norm(x))

    def rotary(x, cos, sin):  # x [B, T, H, D]; cos, sin [T, D/2]
        x1, x2 = x.chunk(2, dim=-1)
        cos, sin = cos[:, None, :], sin[:, None, :]
        return torch.cat((x1 * cos + x2 * sin, x2 * cos - x1 * sin), dim=-1)

    def rotary_tables(T, dtype):
        quarter = D // 4
        freq = (1.0 / 1024) ** torch.linspace(0, 1, quarter, dtype=torch.float64)
        freq = torch.cat([freq, freq.new_zeros(quarter)])
        theta = torch.arange(T, dtype=torch.float64)[:, None] * freq[None, :]
        return theta.cos().to(dtype), theta.sin().to(dtype)

    def masks(tokens, window):
        """{window_blocks: [B, 1, T, T] bool}: causal, same document, within the window."""
        B, T = tokens.shape
        pos = torch.arange(T)
        doc = (tokens == cfg["eot_id"]).cumsum(dim=1)
        causal = pos[:, None] >= pos[None, :]
        same_doc = doc[:, :, None] == doc[:, None, :]
        blk = pos // cfg["block_size"]
        out = {}
        for w in sorted({layer_window(cfg, i, window) for i in range(L)} - {0}):
            in_window = (blk[:, None] - blk[None, :]) < w
            out[w] = (same_doc & (causal & in_window))[:, None]
        return out

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = nn.Embedding(V, d)
            self.value_embeds = nn.ModuleList([nn.Embedding(V, d) for _ in range(3)])
            self.blocks = nn.ModuleList([Block(i) for i in range(L)])
            self.lm_head = nn.Linear(d, Vp, bias=False)
            self.skip_weights = nn.Parameter(torch.ones(L // 2))
            # The seed's initialisation; the projections into the residual stream start at zero.
            with torch.no_grad():
                for name, p in self.named_parameters():
                    if name.startswith("blocks.") and p.ndim >= 2:
                        bound = math.sqrt(3) * 0.5 * p.shape[-1] ** -0.5
                        p.uniform_(-bound, bound)
                        if name.endswith("c_proj.weight"):
                            p.zero_()
                self.lm_head.weight.zero_()

        def forward(self, inputs, targets, window, cos, sin):
            B, T = inputs.shape
            m = masks(inputs, window)
            ve = [e(inputs) for e in self.value_embeds]
            x = x0 = rms_norm(self.embed(inputs))
            skips, n = [], L // 2
            for i, block in enumerate(self.blocks):
                if i >= n:
                    x = x + self.skip_weights[i - n] * skips.pop()
                vi = value_embed_index(i)
                w = layer_window(cfg, i, window)
                x = block(x, x0, ve[vi] if vi is not None else None, m.get(w), cos, sin)
                if i < n:
                    skips.append(x)
            logits = self.lm_head(rms_norm(x))
            if logits.dtype == torch.bfloat16:  # autocast's; the seed soft-caps in fp32
                logits = logits.float()
            logits = cfg["logit_softcap"] * torch.sigmoid(logits / (7.5 * math.sqrt(d)))
            return F.cross_entropy(logits.view(-1, Vp), targets.reshape(-1))

    def newton_schulz5(G, steps, dtype):
        """The seed's zeropower_via_newtonschulz5, batched over leading dimensions."""
        a, b, c = NS_COEFFS
        X = G.to(dtype)
        tall = G.size(-2) > G.size(-1)
        if tall:
            X = X.mT
        X = X / (X.norm(dim=(-2, -1), keepdim=True) + 1e-7)
        for _ in range(steps):
            A = X @ X.mT
            B = b * A + c * A @ A
            X = a * X + B @ X
        return X.mT if tall else X

    class Muon(torch.optim.Optimizer):
        """The seed's Muon on one process: Nesterov momentum, Newton-Schulz, aspect scaling."""

        def __init__(self, params, lr, momentum, ns_steps, ns_dtype):
            super().__init__(params, dict(lr=lr, momentum=momentum, ns_steps=ns_steps))
            self.ns_dtype = ns_dtype

        @torch.no_grad()
        def step(self):
            for group in self.param_groups:
                m = group["momentum"]
                for p in group["params"]:
                    state = self.state[p]
                    if "buf" not in state:
                        state["buf"] = torch.zeros_like(p)
                    buf = state["buf"]
                    buf.lerp_(p.grad, 1 - m)
                    u = p.grad.lerp(buf, m)
                    u = newton_schulz5(u, group["ns_steps"], self.ns_dtype)
                    scale = max(1.0, p.size(-2) / p.size(-1)) ** 0.5
                    p.add_(u.to(p.dtype), alpha=-group["lr"] * scale)

    def optimizers(model, ns_dtype):
        matrices = [p for n, p in model.named_parameters()
                    if n.startswith("blocks.") and p.ndim >= 2]
        embeds = [model.embed.weight] + [e.weight for e in model.value_embeds]
        scalars = [p for n, p in model.named_parameters() if p.ndim < 2]
        adam = torch.optim.Adam(
            [dict(params=embeds, lr=cfg["adam_embed_lr"]),
             dict(params=[model.lm_head.weight], lr=cfg["adam_head_lr"]),
             dict(params=scalars, lr=cfg["adam_scalar_lr"])],
            betas=(cfg["adam_beta1"], cfg["adam_beta2"]), eps=cfg["adam_eps"])
        muon = Muon(matrices, cfg["muon_lr"], cfg["muon_momentum_end"], cfg["muon_ns_steps"],
                    ns_dtype)
        n_params = sum(p.numel() for p in model.parameters())
        assert n_params == sum(p.numel() for p in matrices + embeds + scalars) + \
            model.lm_head.weight.numel(), "every parameter is in exactly one optimizer"
        return muon, adam

    return GPT, optimizers, rotary_tables


# ----------------------------------------------------------------------------------------------


def random_tokens(torch, cfg: dict, gen):
    """[sequences, T + 1] as `nanogpt bench train` lays them out: EOT first, no other EOT."""
    n, T = cfg["tokens_per_step"] // cfg["train_seq_len"], cfg["train_seq_len"]
    t = torch.randint(0, cfg["vocab_size"] - 1, (n, T + 1), generator=gen)
    t = t + (t >= cfg["eot_id"]).long()
    t[:, 0] = cfg["eot_id"]
    return t


def load_average() -> float:
    return os.getloadavg()[0]


def busy_cores(seconds: float = 0.5) -> float:
    """Cores kept busy by other processes over `seconds` (/proc/stat; we sleep meanwhile)."""
    def sample():
        with open("/proc/stat", encoding="ascii") as f:
            v = [float(x) for x in f.readline().split()[1:9]]
        return sum(v) - v[3] - v[4], sum(v)
    b0, t0 = sample()
    time.sleep(seconds)
    b1, t1 = sample()
    return (b1 - b0) / (t1 - t0) * os.cpu_count() if t1 > t0 else 0.0


def choose_omp_wait_policy(requested: str) -> str:
    """OpenMP's threads spin at barriers by default; with other processes on the cores, a
    spinning thread burns the slice its partner needs. Measured here under load ~10: the cpu
    preset's bf16 step took 24 s with the default and 6.6 s with OMP_WAIT_POLICY=passive. So
    'auto' is passive when more than half a core is busy already, else OpenMP's default. A
    policy already in the environment is kept."""
    if os.environ.get("OMP_WAIT_POLICY"):
        return os.environ["OMP_WAIT_POLICY"].lower()
    if requested != "auto":
        return requested
    return "passive" if busy_cores() > 0.5 else "default"


_OPENBLAS_CORE_LEVEL = {
    "skylakex": 3, "cooperlake": 3, "sapphirerapids": 3,  # AVX-512
    "haswell": 2, "zen": 2, "excavator": 2,  # AVX2 + FMA
    "sandybridge": 1, "bulldozer": 1, "piledriver": 1, "steamroller": 1,  # AVX
}


def use_openblas_widest_core() -> str:
    """PyTorch's fp32 products go to libblas, which is OpenBLAS here. Built with DYNAMIC_ARCH
    (Debian's), OpenBLAS 0.3.21 picks its kernels from the CPU's model number when it loads and
    falls back to Prescott's SSE3 kernels on a model it does not know (the Xeon family 6 model
    207 under KVM: a fifth of its AVX-512 speed). As bench/gemm_vs_peers.cpp does, when the core
    it would choose lacks the widest vectors the CPU has, set OPENBLAS_CORETYPE (read at load,
    so before torch is imported) to one that has them. A value already set is kept. Returns the
    core OpenBLAS will run, for the report."""
    if os.environ.get("OPENBLAS_CORETYPE"):
        return os.environ["OPENBLAS_CORETYPE"]
    flags = set()
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("flags"):
                flags = set(line.split(":", 1)[1].split())
                break
    if {"avx512f", "avx512bw", "avx512vl"} <= flags:
        want = "SkylakeX"
    elif {"avx2", "fma"} <= flags:
        want = "Haswell"
    else:
        want = ""
    probe = ("import ctypes; lib = ctypes.CDLL('libopenblas.so.0'); "
             "lib.openblas_get_corename.restype = ctypes.c_char_p; "
             "print(lib.openblas_get_corename().decode())")
    try:
        chosen = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                                check=True, timeout=60).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown (libopenblas.so.0 did not load)"
    level = _OPENBLAS_CORE_LEVEL
    if want and level.get(chosen.lower(), 0) < level[want.lower()]:
        print(f"OpenBLAS chose its {chosen} kernels on a CPU with wider vectors: running it "
              f"with OPENBLAS_CORETYPE={want}", file=sys.stderr)
        os.environ["OPENBLAS_CORETYPE"] = want
        return want
    return chosen


def step_result(torch, args, cfg: dict, T: int, micro: int, window: int, times: list,
                loss_first: float, loss_last: float, load_before: float, load_after: float,
                ranks: int) -> dict:
    """The JSON line of a timed run; with ranks > 1 (DDP) every rank repeats Newton-Schulz."""
    med = statistics.median(times)
    model_flops = model_flops_per_step(cfg, window)
    ns_flops = newton_schulz_flops(cfg) * ranks
    return {
        "bench": "pytorch_train_step",
        "mode": args.mode,
        "preset": args.preset,
        "sets": args.set,
        "tokens_per_step": cfg["tokens_per_step"],
        "seq_len": T,
        "micro_batch": micro,
        "window_blocks": window,
        "steps": args.steps,
        "warmup": args.warmup,
        "median_step_s": med,
        "min_step_s": min(times),
        "max_step_s": max(times),
        "step_times_s": times,
        "tokens_per_s": cfg["tokens_per_step"] / med,
        "model_flops_per_step": model_flops,
        "model_tflops": model_flops / med / 1e12,
        "flops_per_step": model_flops + ns_flops,
        "tflops": (model_flops + ns_flops) / med / 1e12,
        "loss_first": loss_first,
        "loss_last": loss_last,
        "ns_dtype": args.ns_dtype,
        "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY", "default"),
        "openblas_core": args.openblas_core,
        "torch": torch.__version__,
        "mkldnn": torch.backends.mkldnn.is_available(),
        "loadavg_before": load_before,
        "loadavg_after": load_after,
    }


def run_mode(args, cfg: dict) -> dict:
    import torch

    torch.set_num_threads(args.threads)
    torch.manual_seed(cfg.get("seed", 0))
    ns_dtype = torch.bfloat16 if args.ns_dtype == "bf16" else torch.float32
    GPT, optimizers, rotary_tables = build(torch, cfg)
    model = GPT()
    muon, adam = optimizers(model, ns_dtype)
    T = cfg["train_seq_len"]
    seqs = cfg["tokens_per_step"] // T
    # Default: as many sequences as keep one micro-batch's fp32 logits under 512 MiB. The
    # soft-capped head keeps ~5 logit-sized tensors alive for the backward; at 4 × 1024 tokens
    # of the speedrun vocabulary that peaked at 19 GB, on a 24 GB machine.
    micro = min(args.micro_batch or max(1, (512 << 20) // (4 * T * vocab_padded(cfg))), seqs)
    if seqs % micro:
        raise SystemExit(f"--micro-batch {micro} must divide the {seqs} sequences of a step")
    window = args.window or T // cfg["block_size"]
    cos, sin = rotary_tables(T, torch.float32)
    autocast = torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.mode == "bf16")
    gen = torch.Generator().manual_seed(1234)

    times, losses = [], []
    load_before = load_average()
    for step in range(args.warmup + args.steps):
        batch = random_tokens(torch, cfg, gen)  # data loading is not part of the step
        t0 = time.perf_counter()
        total = 0.0
        for s in range(0, seqs, micro):
            inputs, targets = batch[s:s + micro, :-1], batch[s:s + micro, 1:]
            with autocast:
                loss = model(inputs, targets, window, cos, sin)
            (loss * (micro / seqs)).backward()
            total += loss.item() * micro / seqs
        muon.step()
        adam.step()
        model.zero_grad(set_to_none=True)
        dt = time.perf_counter() - t0
        losses.append(total)
        if step >= args.warmup:
            times.append(dt)
        print(f"[pytorch {args.mode}] step {step + 1}/{args.warmup + args.steps}: {dt:.3f} s, "
              f"loss {total:.4f}", file=sys.stderr, flush=True)
    load_after = load_average()

    result = step_result(torch, args, cfg, T, micro, window, times, losses[0], losses[-1],
                         load_before, load_after, ranks=1)
    result["threads"] = torch.get_num_threads()
    result["peak_rss_bytes"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    return result


def free_port() -> int:
    import socket
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def ddp_worker(rank: int, args, cfg: dict, port: int) -> None:
    """One rank of --ddp-ranks: the step of run_mode on this rank's share of the global batch."""
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    world = args.ddp_ranks
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")  # the loopback, whatever the hostname says
    dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.set_num_threads(args.threads_per_rank)
    torch.manual_seed(cfg.get("seed", 0))  # the same weights everywhere (DDP also broadcasts)
    ns_dtype = torch.bfloat16 if args.ns_dtype == "bf16" else torch.float32
    GPT, optimizers, rotary_tables = build(torch, cfg)
    model = GPT()
    muon, adam = optimizers(model, ns_dtype)
    ddp = DistributedDataParallel(model)
    T = cfg["train_seq_len"]
    seqs = cfg["tokens_per_step"] // T
    local = seqs // world
    first = rank * local
    micro = min(args.micro_batch or max(1, (512 << 20) // (4 * T * vocab_padded(cfg))), local)
    if local % micro:
        raise SystemExit(f"--micro-batch {micro} must divide the {local} sequences of a rank")
    window = args.window or T // cfg["block_size"]
    cos, sin = rotary_tables(T, torch.float32)
    autocast = torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.mode == "bf16")
    gen = torch.Generator().manual_seed(1234)  # every rank draws the same global batch

    times, losses = [], []
    load_before = load_average()
    for step in range(args.warmup + args.steps):
        batch = random_tokens(torch, cfg, gen)[first:first + local]
        t0 = time.perf_counter()
        total = 0.0
        for s in range(0, local, micro):
            inputs, targets = batch[s:s + micro, :-1], batch[s:s + micro, 1:]
            last = s + micro >= local
            with (contextlib.nullcontext() if last else ddp.no_sync()):
                with autocast:
                    loss = ddp(inputs, targets, window, cos, sin)
                (loss * (micro / local)).backward()  # DDP averages over the ranks
            total += loss.item() * micro / local
        muon.step()
        adam.step()
        model.zero_grad(set_to_none=True)
        dt = time.perf_counter() - t0
        losses.append(total)
        if step >= args.warmup:
            times.append(dt)
        if rank == 0:
            print(f"[pytorch ddp {world}x{args.threads_per_rank} {args.mode}] step "
                  f"{step + 1}/{args.warmup + args.steps}: {dt:.3f} s, loss (rank 0) {total:.4f}",
                  file=sys.stderr, flush=True)
    load_after = load_average()
    # After the timing: the slowest rank's step times, and the global mean losses.
    t = torch.tensor(times, dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    lo = torch.tensor(losses, dtype=torch.float64)
    dist.all_reduce(lo)
    lo /= world
    rss = torch.tensor([resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024.0],
                       dtype=torch.float64)
    dist.all_reduce(rss, op=dist.ReduceOp.MAX)
    dist.destroy_process_group()
    if rank != 0:
        return
    result = step_result(torch, args, cfg, T, micro, window, t.tolist(), lo[0].item(),
                         lo[-1].item(), load_before, load_after, ranks=world)
    result.update({"ranks": world, "backend": "gloo", "threads": args.threads_per_rank,
                   "threads_per_rank": args.threads_per_rank,
                   "peak_rss_bytes_per_rank": rss.item()})
    print(json.dumps(result), flush=True)


def run_ddp(args, cfg: dict) -> None:
    import torch.multiprocessing as mp

    seqs = cfg["tokens_per_step"] // cfg["train_seq_len"]
    if seqs % args.ddp_ranks:
        raise SystemExit(f"--ddp-ranks {args.ddp_ranks} must divide the {seqs} sequences of a "
                         f"step (tokens_per_step / train_seq_len)")
    mp.spawn(ddp_worker, args=(args, cfg, free_port()), nprocs=args.ddp_ranks, join=True)


def check_against_reference(args) -> None:
    """Loss and gradients of this model equal gpt_reference.py's, in float64, on a small config."""
    import torch

    sys.path.insert(0, os.path.join(REPO, "tools", "golden"))
    import gpt_reference as ref

    torch.set_num_threads(args.threads)
    torch.set_default_dtype(torch.float64)
    torch.manual_seed(0)
    cfg = dict(PRESETS["speedrun"], vocab_size=300, eot_id=299, num_layers=8, num_heads=2,
               head_dim=16, model_dim=32, attn_free_layers=[5], train_seq_len=384,
               tokens_per_step=768)
    window = 2  # long layers 2 blocks, short 1: the window mask matters at T = 384
    GPT, _, rotary_tables = build(torch, cfg)
    ours = GPT()
    with torch.no_grad():  # non-zero everywhere, so every path carries gradient
        for p in ours.parameters():
            p.copy_(torch.randn_like(p) * (0.3 if p.ndim >= 2 else 1.0))
    theirs = ref.GPT(ref.GPTConfig(vocab_size=300, num_layers=8, num_heads=2, head_dim=16,
                                   model_dim=32, attn_free_layers=[5], window_blocks=window,
                                   seq_len=384, eot_id=299))
    theirs.load_state_dict(ours.state_dict())
    gen = torch.Generator().manual_seed(7)
    tokens = torch.randint(0, 300, (2, 385), generator=gen)
    tokens[:, ::50] = 299  # several documents per sequence
    cos, sin = rotary_tables(384, torch.float64)
    loss = ours(tokens[:, :-1], tokens[:, 1:], window, cos, sin)
    loss.backward()
    ref_loss = sum(theirs(tokens[b, :-1], tokens[b, 1:]) for b in range(2)) / 2
    ref_loss.backward()
    worst = 0.0
    theirs_by_name = dict(theirs.named_parameters())
    assert theirs_by_name.keys() == dict(ours.named_parameters()).keys()
    for name, p in ours.named_parameters():
        q = theirs_by_name[name]
        err = ((p.grad - q.grad).abs().max() / q.grad.abs().max().clamp_min(1e-300)).item()
        worst = max(worst, err)
    dl = abs(loss.item() - ref_loss.item())
    print(json.dumps({"check": "gpt_reference", "loss": loss.item(), "ref_loss": ref_loss.item(),
                      "loss_abs_diff": dl, "max_grad_rel_diff": worst}))
    if dl > 1e-10 or worst > 1e-8:
        raise SystemExit("pytorch_train_step: the model differs from tools/golden/gpt_reference.py")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--preset", default="cpu", help="cpu or speedrun (default cpu)")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="override a configuration key, as nanogpt's --set (repeatable)")
    ap.add_argument("--nanogpt", help="nanogpt binary: resolve the configuration with it")
    ap.add_argument("--mode", choices=["fp32", "bf16", "both"], default="both")
    ap.add_argument("--steps", type=int, default=5, help="timed steps (median reported)")
    ap.add_argument("--warmup", type=int, default=1, help="untimed steps first")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--window", type=int, default=0,
                    help="long layers' window in blocks (default the whole sequence, as "
                         "`nanogpt bench train`); short layers half")
    ap.add_argument("--micro-batch", type=int, default=0,
                    help="sequences per forward/backward (default: as many as keep the "
                         "logits under 512 MiB: all 8 for cpu, 2 for speedrun at T = 1024)")
    ap.add_argument("--ns-dtype", choices=["bf16", "fp32"], default="bf16",
                    help="Newton-Schulz precision (the seed: bf16)")
    ap.add_argument("--omp-wait-policy", choices=["auto", "active", "passive", "default"],
                    default="auto",
                    help="OpenMP idle threads: spin (active) or sleep (passive); auto: passive "
                         "when other processes keep the cores busy (OMP_WAIT_POLICY wins)")
    ap.add_argument("--ddp-ranks", type=int, default=0,
                    help="train with DistributedDataParallel on this many processes (gloo, "
                         "127.0.0.1), each on its share of the global batch; 0: one process")
    ap.add_argument("--threads-per-rank", type=int, default=1,
                    help="with --ddp-ranks: torch threads of each rank (default 1)")
    ap.add_argument("--check", action="store_true",
                    help="compare the model with tools/golden/gpt_reference.py and exit")
    args = ap.parse_args()
    if args.steps < 1 or args.warmup < 0 or args.threads < 1:
        ap.error("--steps >= 1, --warmup >= 0 and --threads >= 1")
    if args.ddp_ranks < 0 or args.threads_per_rank < 1:
        ap.error("--ddp-ranks >= 0 and --threads-per-rank >= 1")

    # Before torch loads: OpenMP (torch, oneDNN) and OpenBLAS's own pthreads read these at start
    # (the DDP ranks, spawned, inherit them).
    threads = args.threads_per_rank if args.ddp_ranks else args.threads
    os.environ["OMP_NUM_THREADS"] = str(threads)
    os.environ["OPENBLAS_NUM_THREADS"] = str(threads)
    policy = choose_omp_wait_policy(args.omp_wait_policy)
    if policy == "default":
        os.environ.pop("OMP_WAIT_POLICY", None)
    else:
        os.environ["OMP_WAIT_POLICY"] = policy
    args.openblas_core = use_openblas_widest_core()

    if args.check:
        check_against_reference(args)
        return
    cfg = resolve_config(args)
    if args.mode != "both":
        if args.ddp_ranks:
            run_ddp(args, cfg)
        else:
            print(json.dumps(run_mode(args, cfg)), flush=True)
        return

    # Each mode in a fresh process: no allocator state or peak memory carried between them.
    results = []
    for mode in ("fp32", "bf16"):
        # Both modes under the policy decided here, not each under its own reading of the load.
        cmd = [sys.executable, os.path.abspath(__file__), "--mode", mode,
               "--omp-wait-policy", policy]
        skip = {"--mode", "--omp-wait-policy"}
        it = iter(sys.argv[1:])
        for a in it:
            if a in skip:
                next(it, None)
            elif not any(a.startswith(f + "=") for f in skip):
                cmd.append(a)
        out = subprocess.run(cmd, check=True, stdout=subprocess.PIPE, text=True).stdout
        line = out.strip().splitlines()[-1]
        print(line, flush=True)
        results.append(json.loads(line))
    best = max(results, key=lambda r: r["tokens_per_s"])
    print(json.dumps({
        "bench": "pytorch_train_step", "summary": True, "preset": args.preset, "sets": args.set,
        "best_mode": best["mode"], "best_tokens_per_s": best["tokens_per_s"],
        "best_median_step_s": best["median_step_s"], "best_model_tflops": best["model_tflops"],
        "tokens_per_s": {r["mode"]: r["tokens_per_s"] for r in results},
        **({"ranks": args.ddp_ranks, "threads_per_rank": args.threads_per_rank}
           if args.ddp_ranks else {}),
    }), flush=True)


if __name__ == "__main__":
    main()
