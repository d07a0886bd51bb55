#!/usr/bin/python3
"""Does bf16 train like fp32? The same run twice, differing only in `precision`, step by step.

Usage:
  bench/bf16_vs_fp32_curve.py [--nanogpt build/nanogpt] [--config cpu] [--steps 300]
      [--train 'data/fortunes/shards/train_*.bin'] [--val 'data/fortunes/shards/val_*.bin']
      [--out DIR] [--set key=value ...] [--reuse]

Trains `--config` (default: the `cpu` preset, the README's main job) for `--steps` steps in fp32
and in bf16 from the same initialisation on the same batches (the loader and the seed are
precision-independent), with validation every 50 steps, into DIR/fp32 and DIR/bf16 (default a
directory under /tmp). Then compares the two loss curves from their metrics.jsonl:

  - per step, |loss_bf16 − loss_fp32| / loss_fp32 (the worst step, and the mean);
  - the same on exponentially smoothed curves (α = 0.1), which is what a plotted curve shows:
    single-batch losses of two precisions wobble apart by more than the trend does;
  - the validation losses at every evaluation and at the end.

The issue's target is that the bf16 curve stays within 1% of fp32's over 300 steps of the
default preset. Prints a table and, last, one JSON line. It is a measurement, never a pass/fail
test; `--reuse` re-reads finished run directories instead of training again. The data are
prepared by ./scripts/main.sh (data/fortunes/).
"""
from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TARGET = 0.01


def read_metrics(run_dir: str) -> list[dict]:
    path = os.path.join(run_dir, "metrics.jsonl")
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def train(args, precision: str, run_dir: str) -> None:
    cmd = [args.nanogpt, "train", "--config", args.config, "--train", args.train, "--val",
           args.val, "--out", run_dir, "--set", f"num_iterations={args.steps}", "--set",
           f"precision={precision}", "--set", "val_loss_every=50"]
    for s in args.set:
        cmd += ["--set", s]
    resume = os.path.isdir(os.path.join(run_dir, "checkpoints"))
    if resume:
        cmd.append("--resume")
    print(f"$ {shlex.join(cmd)}", file=sys.stderr, flush=True)
    p = subprocess.run(cmd, stdout=subprocess.PIPE, text=True)
    if p.returncode != 0:
        sys.exit(f"bf16_vs_fp32_curve: training in {precision} failed (exit {p.returncode})")


def smoothed(values: list[float], alpha: float = 0.1) -> list[float]:
    out, ema = [], None
    for v in values:
        ema = v if ema is None else alpha * v + (1 - alpha) * ema
        out.append(ema)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--nanogpt", default=os.path.join(REPO, "build", "nanogpt"))
    ap.add_argument("--config", default="cpu")
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--train", default=os.path.join(REPO, "data/fortunes/shards/train_*.bin"))
    ap.add_argument("--val", default=os.path.join(REPO, "data/fortunes/shards/val_*.bin"))
    ap.add_argument("--out", default=None, help="directory for the two runs")
    ap.add_argument("--set", action="append", default=[], help="key=value for both runs")
    ap.add_argument("--reuse", action="store_true", help="read finished runs instead of training")
    args = ap.parse_args()
    if args.steps < 1:
        ap.error("--steps must be at least 1")
    out = args.out or tempfile.mkdtemp(prefix="nanogpt-bf16-curve-")
    runs = {}
    for precision in ("fp32", "bf16"):
        run_dir = os.path.join(out, precision)
        if not (args.reuse and os.path.exists(os.path.join(run_dir, "metrics.jsonl"))):
            train(args, precision, run_dir)
        runs[precision] = read_metrics(run_dir)

    a, b = runs["fp32"], runs["bf16"]
    n = min(len(a), len(b))
    if n == 0:
        sys.exit("bf16_vs_fp32_curve: no steps recorded")
    la = [m["loss"] for m in a[:n]]
    lb = [m["loss"] for m in b[:n]]
    rel = [abs(y - x) / x for x, y in zip(la, lb)]
    sa, sb = smoothed(la), smoothed(lb)
    rel_smooth = [abs(y - x) / x for x, y in zip(sa, sb)]
    worst = max(range(n), key=lambda i: rel[i])
    worst_smooth = max(range(n), key=lambda i: rel_smooth[i])
    vals = [(m["step"], m["val_loss"], mb["val_loss"]) for m, mb in zip(a[:n], b[:n])
            if "val_loss" in m and "val_loss" in mb]

    print(f"{'step':>6} {'fp32':>9} {'bf16':>9} {'rel diff':>9}   (training loss, every 25 steps)")
    for i in range(0, n, 25):
        print(f"{a[i]['step']:>6} {la[i]:9.4f} {lb[i]:9.4f} {rel[i]:9.2%}")
    print(f"{'step':>6} {'val fp32':>9} {'val bf16':>9} {'rel diff':>9}")
    for step, x, y in vals:
        print(f"{step:>6} {x:9.4f} {y:9.4f} {abs(y - x) / x:9.2%}")
    summary = {
        "bench": "bf16_vs_fp32_curve",
        "config": args.config,
        "steps": n,
        "sets": args.set,
        "max_rel_diff": rel[worst],
        "max_rel_diff_step": a[worst]["step"],
        "mean_rel_diff": sum(rel) / n,
        "max_rel_diff_smoothed": rel_smooth[worst_smooth],
        "max_rel_diff_smoothed_step": a[worst_smooth]["step"],
        "final_loss": {"fp32": la[-1], "bf16": lb[-1]},
        "val_loss": [{"step": s, "fp32": x, "bf16": y, "rel_diff": abs(y - x) / x}
                     for s, x, y in vals],
        "target_rel_diff": TARGET,
        "within_target_smoothed": rel_smooth[worst_smooth] <= TARGET,
        "median_step_s": {p: sorted(m["step_s"] for m in r[:n])[n // 2] for p, r in runs.items()},
        "runs": out,
    }
    print(f"worst step: {rel[worst]:.2%} at step {a[worst]['step']}; mean {sum(rel) / n:.2%}; "
          f"smoothed worst {rel_smooth[worst_smooth]:.2%} at step {a[worst_smooth]['step']} "
          f"(target {TARGET:.0%})")
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
