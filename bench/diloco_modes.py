#!/usr/bin/python3
"""DDP, DiLoCo and Streaming DiLoCo on the same tokens: final validation loss, bytes exchanged,
peak bytes per step, a loss-vs-step plot, and a projection of each mode's step time across
machines.

Usage (from the repository, after scripts/main.sh has prepared data/fortunes):
  bench/diloco_modes.py [--nanogpt build/nanogpt] [--replicas 2] [--steps 250]
      [--modes ddp,diloco30,diloco100,streaming2,streaming3] [--out bench-diloco]
      [--data data/fortunes/shards] [--mpirun-args "..."] [--project] [--only-project]

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

--project: the `speedrun` model (T = 1024, 8 sequences per step over 2 nodes, 4 each) trained
for 2 steps per mode on 2 ranks here, for its measured compute time per step (step_s minus
the exposed communication) and its bytes per step and per fragment; then each mode's
wall-clock per step between 2 nodes at 1 and 10 Gbit/s (50 us per hop):
  ddp          max(compute, t_ring) where t_ring moves the step's bytes (all of the
               communication hidden behind the backward: optimistic for DDP)
  diloco       compute + t(sync bytes) / H (the sync blocks training, once per H steps)
  streaming    compute + max(0, t(fragment bytes) - delay·compute) / (H/P) (a fragment's
               transfer overlaps `delay` steps; what exceeds them is waited for)
Timings need a quiet machine: the script prints the load average before each run.
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


def ring_seconds(bytes_sent: float, gbit: float, hops: int = 1) -> float:
    # bytes_sent is what one rank sends (already the ring's (N-1)/N share): at N = 2, one hop.
    return hops * HOP_LATENCY_S + bytes_sent * 8 / (gbit * 1e9)


def project(args, modes: list[str]) -> list[dict]:
    sets = ["num_layers=12", "model_dim=768", "num_heads=6", "head_dim=128",
            "vocab_size=50304", "eot_id=50256", "train_seq_len=1024", "tokens_per_step=8192",
            "max_window_tokens=1024", "val_loss_every=0", "val_tokens=8192",
            "val_seq_len=1024", "attn_free_layers=[7]", "num_iterations=30"]
    # The speedrun model on the fortunes data is only for timing and bytes: its vocabulary is
    # larger than the corpus's tokenizer, which is harmless for both.
    out = []
    for mode in modes:
        sync_sets = sets + (["sync_every=2"] if mode.startswith("streaming") else [])
        if mode.startswith("streaming") and int(mode.partition("-")[0][9:]) > 2:
            sync_sets[-1] = f"sync_every={int(mode.partition('-')[0][9:])}"
        rows = train(args, mode, 2, os.path.join(args.out, f"project_{mode}"), sync_sets,
                     ["--max-steps", "2"] if not mode.startswith("streaming") else
                     ["--max-steps", "2"])
        last = rows[-1]
        compute = last["step_s"] - last.get("comm_exposed_s", 0.0)
        if mode == "ddp":
            step_bytes = last["comm_bytes"]
        else:
            step_bytes = max(r["comm_bytes"] for r in rows)
        out.append({"mode": mode, "compute_s": compute, "bytes_measured": step_bytes})
    ddp = next(p for p in out if p["mode"] == "ddp")
    for p in out:
        mode = p["mode"]
        for gbit in (1.0, 10.0):
            if mode == "ddp":
                t = max(p["compute_s"], ring_seconds(p["bytes_measured"], gbit, 2))
            elif mode.startswith("diloco"):
                H = int(mode.partition("-")[0][6:])
                # diloco here ran with sync_every = H but 2 steps: its sync bytes are the
                # whole model's at 32 bits, the DDP gradient's size over 2.
                sync_bytes = ddp["bytes_measured"] / 2
                t = p["compute_s"] + ring_seconds(sync_bytes, gbit) / H
            else:
                P = int(mode.partition("-")[0][9:])
                H = 30
                frag = p["bytes_measured"]
                t = p["compute_s"] + max(0.0, ring_seconds(frag, gbit) - p["compute_s"]) / (H / P)
            p[f"step_s_at_{int(gbit)}gbit"] = t
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--nanogpt", default=os.path.join(REPO, "build", "nanogpt"))
    ap.add_argument("--replicas", type=int, default=2)
    ap.add_argument("--steps", type=int, default=250)
    ap.add_argument("--modes", default="ddp,diloco30,diloco100,streaming2,streaming3")
    ap.add_argument("--data", default=os.path.join(REPO, "data", "fortunes", "shards"))
    ap.add_argument("--out", default="bench-diloco")
    ap.add_argument("--mpirun-args", default=MPIRUN_ARGS)
    ap.add_argument("--project", action="store_true")
    ap.add_argument("--only-project", action="store_true")
    args = ap.parse_args()
    if not os.path.exists(os.path.join(args.data, "meta.json")):
        sys.exit(f"no shards at {args.data}: run scripts/main.sh first (it prepares "
                 "data/fortunes), or give --data")
    os.makedirs(args.out, exist_ok=True)
    modes = args.modes.split(",")
    result = {"cpu": cpu_name(args.nanogpt), "replicas": args.replicas, "steps": args.steps}
    if not args.only_project:
        summaries = []
        for mode in modes:
            rows = train(args, mode, args.replicas,
                         os.path.join(args.out, f"{mode}_r{args.replicas}"),
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
    if args.project or args.only_project:
        proj = project(args, ["ddp"] + [m for m in modes if m != "ddp"])
        print("\nProjection, speedrun model, 2 nodes (compute measured here, bytes measured):")
        print("| mode | compute s/step | step s at 1 Gbit/s | step s at 10 Gbit/s |")
        print("|---|---|---|---|")
        for p in proj:
            print(f"| {p['mode']} | {p['compute_s']:.2f} | {p['step_s_at_1gbit']:.2f} | "
                  f"{p['step_s_at_10gbit']:.2f} |")
        result["projection"] = proj
    print(json.dumps(result))


if __name__ == "__main__":
    main()
