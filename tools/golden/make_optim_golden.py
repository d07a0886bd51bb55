#!/usr/bin/python3
"""Writes tests/data/golden_optim.safetensors: float32 golden data for the Muon and Adam updates.

Usage: /usr/bin/python3 tools/golden/make_optim_golden.py [output path]

Muon (one matrix p, gradient g, momentum buffer buf, momentum m, learning rate lr):
    buf = m * buf + (1 - m) * g
    g'  = (1 - m) * g + m * buf                     (Nesterov)
    X   = g' (transposed first if rows > cols)
    X   = X / (||X||_F + 1e-7)
    5 times: A = X X^T;  B = b A + c A A;  X = a X + B X      (a, b, c) = (3.4445, -4.7750, 2.0315)
    transpose back -> ns
    p  -= lr * sqrt(max(1, rows / cols)) * ns
Everything is float32; the Python scalars m, 1 - m (computed in double), a, b, c, 1e-7 and
lr * sqrt(max(1, rows / cols)) (computed in double) are rounded to float32 where they meet a
tensor. `B = b*A + c*A@A` is evaluated as in modded-nanogpt: (c*A) @ A.

Adam: torch.optim.Adam itself (betas (0.8, 0.95), eps 1e-10, lr 0.04, no weight decay,
single-tensor implementation), 3 steps on a [7, 5] parameter.
"""
import math
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from safetensors_io import load_file, save_file  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEFAULT_OUT = os.path.join(REPO, "tests", "data", "golden_optim.safetensors")
SEED = 1234

NS_COEFFS = (3.4445, -4.7750, 2.0315)
NS_STEPS = 5
NS_EPS = 1e-7
MUON_MOMENTUM = 0.9
MUON_LR = 0.05

ADAM_LR = 0.04
ADAM_BETAS = (0.8, 0.95)
ADAM_EPS = 1e-10


def newton_schulz5(G: torch.Tensor) -> torch.Tensor:
    assert G.ndim == 2 and G.dtype == torch.float32
    a, b, c = NS_COEFFS
    X = G
    transposed = G.shape[0] > G.shape[1]
    if transposed:
        X = X.T
    X = X / (torch.linalg.norm(X) + NS_EPS)  # Frobenius norm
    for _ in range(NS_STEPS):
        A = X @ X.T
        B = b * A + c * A @ A
        X = a * X + B @ X
    if transposed:
        X = X.T
    return X.contiguous()


def muon_step(p, g, buf, momentum=MUON_MOMENTUM, lr=MUON_LR):
    """Returns (ns, p_new, buf_new); the inputs are not modified."""
    m = momentum
    buf = m * buf + (1 - m) * g
    g_eff = (1 - m) * g + m * buf
    ns = newton_schulz5(g_eff)
    rows, cols = p.shape
    p = p - (lr * math.sqrt(max(1.0, rows / cols))) * ns
    return ns, p, buf


def randn(gen, *shape, scale=1.0):
    return (scale * torch.randn(shape, generator=gen, dtype=torch.float32)).contiguous()


def main():
    out_path = sys.argv[1] if len(sys.argv) > 1 else DEFAULT_OUT
    torch.set_num_threads(1)
    gen = torch.Generator().manual_seed(SEED)
    tensors = {}

    # ---- Muon, single steps
    for rows, cols in [(24, 40), (40, 24), (32, 32)]:
        case = f"{rows}x{cols}"
        p0 = randn(gen, rows, cols, scale=0.1)
        g = randn(gen, rows, cols, scale=0.01)
        buf0 = randn(gen, rows, cols, scale=0.01)
        ns, p1, buf1 = muon_step(p0, g, buf0)
        for k, v in dict(p0=p0, g=g, buf0=buf0, ns=ns, p1=p1, buf1=buf1).items():
            assert v.dtype == torch.float32 and v.shape == (rows, cols)
            tensors[f"muon/{case}/{k}"] = v.numpy()
        # Sanity: NS output is roughly orthogonal (singular values ~ in [0.5, 1.5]).
        sv = torch.linalg.svdvals(ns.double())
        print(f"muon {case}: singular values of ns in [{sv.min():.3f}, {sv.max():.3f}],"
              f" |p1 - p0|_max = {float((p1 - p0).abs().max()):.4f}")
        assert 0.3 < float(sv.min()) and float(sv.max()) < 1.5

    # ---- Muon, two consecutive steps on one (tall) matrix with different gradients
    p0 = randn(gen, 40, 24, scale=0.1)
    buf0 = randn(gen, 40, 24, scale=0.01)
    g1 = randn(gen, 40, 24, scale=0.01)
    g2 = randn(gen, 40, 24, scale=0.02)
    ns1, p1, buf1 = muon_step(p0, g1, buf0)
    ns2, p2, buf2 = muon_step(p1, g2, buf1)
    for k, v in dict(p0=p0, buf0=buf0, g1=g1, g2=g2, ns1=ns1, p1=p1, buf1=buf1, ns2=ns2, p2=p2,
                     buf2=buf2).items():
        tensors[f"muon/two_step/{k}"] = v.numpy()
    tensors["muon/momentum"] = np.array([MUON_MOMENTUM], dtype=np.float64)
    tensors["muon/lr"] = np.array([MUON_LR], dtype=np.float64)

    # Cross-check against a float64 evaluation of the same formulas (guidance for tolerances).
    ns64 = newton_schulz5_f64(tensors["muon/40x24/g"], tensors["muon/40x24/buf0"])
    err = np.abs(tensors["muon/40x24/ns"].astype(np.float64) - ns64).max()
    print(f"muon 40x24: max |ns_f32 - ns_f64| = {err:.2e}")
    assert err < 1e-4

    # ---- Adam (torch.optim.Adam itself)
    p = torch.nn.Parameter(randn(gen, 7, 5, scale=0.5))
    tensors["adam/p0"] = p.detach().clone().numpy()
    opt = torch.optim.Adam([p], lr=ADAM_LR, betas=ADAM_BETAS, eps=ADAM_EPS, weight_decay=0,
                           foreach=False)
    grad_scales = [1.0, 0.1, 3.0]
    for step, scale in enumerate(grad_scales, start=1):
        g = randn(gen, 7, 5, scale=scale)
        g[0, 0] = 0.0  # an entry whose moments stay zero (exercises eps)
        g[1, 1] = 1e-6 if step < 3 else -1e-6
        p.grad = g.clone()
        opt.step()
        tensors[f"adam/g{step}"] = g.numpy()
        tensors[f"adam/p{step}"] = p.detach().clone().numpy()
    state = opt.state[p]
    assert int(state["step"]) == 3
    tensors["adam/exp_avg3"] = state["exp_avg"].clone().numpy()
    tensors["adam/exp_avg_sq3"] = state["exp_avg_sq"].clone().numpy()
    tensors["adam/lr"] = np.array([ADAM_LR], dtype=np.float64)
    tensors["adam/betas"] = np.array(ADAM_BETAS, dtype=np.float64)
    tensors["adam/eps"] = np.array([ADAM_EPS], dtype=np.float64)

    # Cross-check torch's Adam against the textbook formula in float64.
    pm = tensors["adam/p0"].astype(np.float64)
    m1 = np.zeros_like(pm)
    m2 = np.zeros_like(pm)
    b1, b2 = ADAM_BETAS
    for t in (1, 2, 3):
        g = tensors[f"adam/g{t}"].astype(np.float64)
        m1 = b1 * m1 + (1 - b1) * g
        m2 = b2 * m2 + (1 - b2) * g * g
        pm = pm - ADAM_LR * (m1 / (1 - b1 ** t)) / (np.sqrt(m2 / (1 - b2 ** t)) + ADAM_EPS)
        err = np.abs(pm - tensors[f"adam/p{t}"]).max()
        print(f"adam step {t}: max |torch f32 - formula f64| = {err:.2e}")
        assert err < 1e-5

    metadata = {
        "generator": f"tools/golden/make_optim_golden.py torch {torch.__version__}",
        "muon": (f"momentum={MUON_MOMENTUM} lr={MUON_LR} nesterov=true ns_steps={NS_STEPS} "
                 f"ns_coeffs={list(NS_COEFFS)} ns_eps={NS_EPS} dtype=float32"),
        "adam": (f"torch.optim.Adam lr={ADAM_LR} betas={list(ADAM_BETAS)} eps={ADAM_EPS} "
                 "weight_decay=0 amsgrad=false foreach=false dtype=float32"),
    }
    save_file(tensors, out_path, metadata)
    back, meta = load_file(out_path)
    assert meta == metadata and sorted(back) == sorted(tensors)
    for k, v in tensors.items():
        assert back[k].dtype == v.dtype and np.array_equal(back[k], v), k
    size = os.path.getsize(out_path)
    assert size < 2 * 1024 * 1024, size
    print(f"wrote {out_path} ({size} bytes, {len(tensors)} tensors)")


def newton_schulz5_f64(g: np.ndarray, buf: np.ndarray) -> np.ndarray:
    """Same Muon step formulas in float64 (numpy), returning ns."""
    m = MUON_MOMENTUM
    g = g.astype(np.float64)
    buf = m * buf.astype(np.float64) + (1 - m) * g
    X = (1 - m) * g + m * buf
    tr = X.shape[0] > X.shape[1]
    if tr:
        X = X.T
    X = X / (np.linalg.norm(X) + NS_EPS)
    a, b, c = NS_COEFFS
    for _ in range(NS_STEPS):
        A = X @ X.T
        X = a * X + (b * A + c * A @ A) @ X
    return X.T if tr else X


if __name__ == "__main__":
    main()
