#!/usr/bin/python3
"""DDP, DiLoCo and Streaming DiLoCo on the same tokens: final validation loss, bytes exchanged,
peak bytes per step, a loss-vs-step plot, and a projection of each mode's step time across
machines.

Usage (from the repository, after scripts/main.sh has prepared data/fortunes):
  bench/diloco_modes.py [--nanogpt build/nanogpt] [--replicas 2] [--steps 250]
      [--modes ddp,diloco30,diloco100,streaming2,streaming3] [--out bench-diloco]
      [--data data/fortunes/shards] [--mpirun-args "..."] [--reuse]

Each mode trains the `cpu` preset (tokens_per_step 4096 split over the replicas: the same
tokens per step as DDP over the same ranks, and the same steps) under
`mpirun -np R` with one replica per rank (R = --replicas; NANOGPT_THREADS = cores / R, at
least 1) and validation every 25 steps:
  ddp          sync=ddp (every step: gradients reduce-scattered, parameters all-gathered)
  dilocoH      sync=diloco sync_every=H, float32 outer gradients, no delay
  streamingP   sync=streaming_diloco fragments=P sync_every=30, 4-bit, delay 1, alpha 0.5
  MODE-avg     the same with outer_lr=1 outer_momentum=0 (the outer step is the replicas' mean)
Outer steps use outer_lr 0.7 and Nesterov momentum 0.9 (DiLoCo's) unless -avg.
Bytes are rank 0's `comm_bytes` from metrics.jsonl (what it sent; every rank sends alike).
"peak" is the largest per-step figure before the last step; the last step of a DiLoCo run
also carries the end-of-run sync that brings every replica to θ_global, reported apart.

The projection of each mode's step time across machines is `nanogpt bench comm --project
--diloco` (C++, from the model's own fragments and the codec's sizes; bench/README.md).
Losses and bytes do not depend on the machine's load (runs are bitwise reproducible); the
script prints the load average before each run anyway.
The last line of output is one JSON object with everything.
"""
from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MPIRUN_ARGS = ("--allow-run-as-root --oversubscribe --bind-to none "
               "--mca btl_vader_single_copy_mechanism none")
HOP_LATENCY_S = 50e-6


def mode_sets(mode: str) -> list[str]:
    base, _, variant = mode.partition("-")
    # "-avg": outer_lr 1 and no momentum, θ_global becomes the replicas' mean at every sync.
    extra = ["outer_lr=1", "outer_momentum=0"] if variant == "avg" else []
    if variant not in ("", "avg"):
        raise SystemExit(f"unknown variant '{variant}' in '{mode}' (only -avg)")
    if base == "ddp":
        return ["sync=ddp"]
    if base.startswith("diloco"):
        return ["sync=diloco", f"sync_every={int(base[6:])}", "outer_grad_bits=32"] + extra
    if base.startswith("streaming"):
        return ["sync=streaming_diloco", f"fragments={int(base[9:])}", "sync_every=30",
                "outer_grad_bits=4", "sync_delay=1"] + extra
    raise SystemExit(f"unknown mode '{mode}' (ddp, dilocoH, streamingP, each with -avg)")


def cpu_name(nanogpt: str) -> str:
    out = subprocess.run([nanogpt, "info"], stdout=subprocess.PIPE, text=True).stdout
    for line in out.splitlines():
        if line.startswith("cpu:"):
            return line[4:].split(";")[0].strip()
    return "unknown"


def train(args, mode: str, ranks: int, out: str, sets: list[str], extra: list[str]) -> list[dict]:
    threads = max(1, (os.cpu_count() or 1) // ranks)
    cmd = (["mpirun"] + shlex.split(args.mpirun_args) + ["-np", str(ranks), "-x",
           f"NANOGPT_THREADS={threads}", args.nanogpt, "train", "--config", "cpu",
           "--train", f"{args.data}/train_*.bin", "--val", f"{args.data}/val_*.bin",
           "--out", out] + [a for s in sets + mode_sets(mode) for a in ("--set", s)] + extra)
    print(f"[{mode}] load {os.getloadavg()[0]:.2f}: {' '.join(cmd)}", file=sys.stderr, flush=True)
    t0 = time.time()
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if proc.returncode != 0:
        sys.exit(f"[{mode}] failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
    print(f"[{mode}] {time.time() - t0:.0f} s", file=sys.stderr, flush=True)
    with open(os.path.join(out, "metrics.jsonl")) as f:
        return [json.loads(line) for line in f]


def summarize(mode: str, rows: list[dict]) -> dict:
    vals = [r for r in rows if "val_loss" in r]
    per_step = [r.get("comm_bytes", 0.0) for r in rows]
    return {"mode": mode, "steps": len(rows), "final_val_loss": vals[-1]["val_loss"],
            "total_bytes": sum(per_step), "peak_bytes_per_step": max(per_step[:-1] or [0.0]),
            "last_step_bytes": per_step[-1],
            "train_seconds": sum(r["step_s"] for r in rows)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--nanogpt", default=os.path.join(REPO, "build", "nanogpt"))
    ap.add_argument("--replicas", type=int, default=2)
    ap.add_argument("--steps", type=int, default=250)
    ap.add_argument("--modes", default="ddp,diloco30,diloco100,streaming2,streaming3")
    ap.add_argument("--data", default=os.path.join(REPO, "data", "fortunes", "shards"))
    ap.add_argument("--out", default="bench-diloco")
    ap.add_argument("--mpirun-args", default=MPIRUN_ARGS)
    ap.add_argument("--reuse", action="store_true",
                    help="take a mode's finished run from --out instead of training it again")
    args = ap.parse_args()
    if not os.path.exists(os.path.join(args.data, "meta.json")):
        sys.exit(f"no shards at {args.data}: run scripts/main.sh first (it prepares "
                 "data/fortunes), or give --data")
    os.makedirs(args.out, exist_ok=True)
    modes = args.modes.split(",")
    result = {"cpu": cpu_name(args.nanogpt), "replicas": args.replicas, "steps": args.steps}
    summaries = []
    for mode in modes:
        out = os.path.join(args.out, f"{mode}_r{args.replicas}")
        metrics_file = os.path.join(out, "metrics.jsonl")
        if args.reuse and os.path.exists(metrics_file):
            with open(metrics_file) as f:
                rows = [json.loads(line) for line in f]
            if len(rows) != args.steps:
                sys.exit(f"--reuse: {metrics_file} has {len(rows)} steps, not {args.steps}")
            print(f"[{mode}] reusing {metrics_file}", file=sys.stderr)
        else:
            rows = train(args, mode, args.replicas, out,
                         [f"num_iterations={args.steps}", "val_loss_every=25"], [])
        summaries.append(summarize(mode, rows))
    ddp = next((s for s in summaries if s["mode"] == "ddp"), None)
    print(f"\n{result['cpu']}; {args.replicas} replicas (1 per rank); cpu preset, "
          f"{args.steps} steps of 4096 tokens")
    print("| mode | final val loss | vs DDP | bytes sent (rank 0) | DDP / mode | "
          "peak bytes/step | DDP peak / mode | last-step sync |")
    print("|---|---|---|---|---|---|---|---|")
    for s in summaries:
        rel = (s["final_val_loss"] / ddp["final_val_loss"] - 1) * 100 if ddp else float("nan")
        fewer = ddp["total_bytes"] / s["total_bytes"] if ddp and s["total_bytes"] else 0
        peak = (ddp["peak_bytes_per_step"] / s["peak_bytes_per_step"]
                if ddp and s["peak_bytes_per_step"] else 0)
        print(f"| {s['mode']} | {s['final_val_loss']:.4f} | {rel:+.2f}% | "
              f"{s['total_bytes'] / 1e6:.1f} MB | {fewer:.0f}x | "
              f"{s['peak_bytes_per_step'] / 1e6:.2f} MB | {peak:.1f}x | "
              f"{s['last_step_bytes'] / 1e6:.2f} MB |")
    result["modes"] = summaries
    metrics = [os.path.join(args.out, f"{m}_r{args.replicas}", "metrics.jsonl") for m in modes]
    svg = os.path.join(args.out, f"loss_r{args.replicas}.svg")
    plot = subprocess.run([args.nanogpt, "plot", *metrics, "--labels", ",".join(modes),
                           "--y", "val_loss", "--out", svg,
                           "--title", f"validation loss, {args.replicas} replicas"],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if plot.returncode == 0:
        print(f"plot: {svg}")
        result["plot"] = svg
    else:
        print(f"plot: not drawn ({plot.stderr.strip()[:200]})")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
