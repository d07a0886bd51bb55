#!/usr/bin/python3
"""The speedrun track's ablations: each of the seed's components switched off (or on) from a
record's configuration, several seeds each, steps and seconds to the target validation loss, or
the loss reached in the record's step budget when the target is never reached.

Usage (from the repository, after scripts/main.sh has prepared data/fortunes):
  bench/speedrun_ablations.py [--nanogpt build/nanogpt] [--config cpu] [--set k=v ...]
      [--seeds 0,1,2] [--target 4.85] [--jobs 2] [--threads 1] [--out bench-ablations]
      [--adam-grid 0.0015,0.003,0.006,0.012] [--variants record,adam,...] [--reuse]

Phases:
  1. Adam's learning rate for the hidden matrices (`adam_matrix_lr`) over --adam-grid, seed 0:
     the fairest Adam is the one with the fewest steps to the target, then the lowest loss.
  2. Every variant × every seed (`nanogpt speedrun --config C --set ... --set seed=S`):
       record          the configuration as given
       adam            matrix_optimizer=adam at the best grid learning rate
       adam-longer     the same with num_iterations = ceil(budget / 0.75): if it does not reach
                       the target by then, Muon needs at most 0.75x Adam's steps (the seed's
                       claim); if it does, its steps say by how much Adam is behind
       no-value-embeddings, no-unet-skips, no-x0-mixing, no-window-warmup
                       the component off (value_embeddings / unet_skips / x0_mixing /
                       window_warmup = false)
       fp8-head        fp8_head=true
       fp32            precision=fp32 (the record runs at auto: bf16 products where the CPU
                       has them)
Runs go --jobs at a time with NANOGPT_THREADS=--threads each. Steps and losses do not depend on
the threads or the load (runs are bitwise reproducible for any thread count); seconds do, so
the table says how the runs were placed and the load average seen.
Output: DIR/<variant>-seed<S>/ (the run, its metrics.jsonl and speedrun.json),
DIR/results.jsonl (--results), and a Markdown table on stdout (mean ± sample standard deviation over seeds).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

SWITCHES = {
    "record": [],
    "no-value-embeddings": ["value_embeddings=false"],
    "no-unet-skips": ["unet_skips=false"],
    "no-x0-mixing": ["x0_mixing=false"],
    "no-window-warmup": ["window_warmup=false"],
    "fp8-head": ["fp8_head=true"],
    "fp32": ["precision=fp32"],
}
DEFAULT_VARIANTS = ["record", "adam", "adam-longer", "no-value-embeddings", "no-unet-skips",
                    "no-x0-mixing", "no-window-warmup", "fp8-head", "fp32"]


def budget_of(args) -> int:
    """The record's num_iterations, as the binary resolves it (preset, file and --set)."""
    cmd = [args.nanogpt, "train", "--config", args.config, "--print-config"]
    for s in args.set:
        cmd += ["--set", s]
    return int(json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True,
                                         cwd=REPO).stdout)["num_iterations"])


def run_one(args, name: str, sets: list[str], seed: int) -> subprocess.Popen | None:
    out = os.path.join(args.out, f"{name}-seed{seed}")
    if args.reuse and os.path.exists(os.path.join(out, "speedrun.json")):
        return None
    if os.path.exists(out):
        subprocess.run(["rm", "-rf", out], check=True)
    cmd = [args.nanogpt, "speedrun", "--config", args.config, "--target", str(args.target),
           "--out", out]
    for s in args.set + sets + [f"seed={seed}"]:
        cmd += ["--set", s]
    env = dict(os.environ, NANOGPT_THREADS=str(args.threads))
    print(f"[{name} seed {seed}] load {os.getloadavg()[0]:.2f}: {' '.join(cmd)}",
          file=sys.stderr, flush=True)
    log = open(out + ".log", "w")
    return subprocess.Popen(cmd, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT)


def run_all(args, jobs: list[tuple[str, list[str], int]]) -> None:
    running: list[tuple[subprocess.Popen, str]] = []
    pending = list(jobs)
    while pending or running:
        while pending and len(running) < args.jobs:
            name, sets, seed = pending.pop(0)
            p = run_one(args, name, sets, seed)
            if p is not None:
                running.append((p, f"{name}-seed{seed}"))
        for p, label in list(running):
            if p.poll() is not None:
                running.remove((p, label))
                if p.returncode != 0:
                    raise SystemExit(f"{label} failed (exit {p.returncode}); see "
                                     f"{os.path.join(args.out, label)}.log")
        time.sleep(0.5)


def result(args, name: str, seed: int) -> dict:
    path = os.path.join(args.out, f"{name}-seed{seed}", "speedrun.json")
    with open(path) as f:
        return json.load(f)


def mean_std(xs: list[float]) -> str:
    if not xs:
        return "–"
    if len(xs) == 1:
        return f"{xs[0]:.4g}"
    return f"{statistics.mean(xs):.4g} ± {statistics.stdev(xs):.2g}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--nanogpt", default=os.path.join(REPO, "build", "nanogpt"))
    ap.add_argument("--config", default="cpu")
    ap.add_argument("--set", action="append", default=[])
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--target", type=float, default=4.85)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", default="bench-ablations")
    ap.add_argument("--adam-grid", default="0.0015,0.003,0.006,0.012")
    ap.add_argument("--variants", default=",".join(DEFAULT_VARIANTS))
    ap.add_argument("--reuse", action="store_true", help="keep runs that already finished")
    ap.add_argument("--results", default="results.jsonl", help="file in --out for every run's line")
    args = ap.parse_args()
    args.out = os.path.abspath(args.out)
    os.makedirs(args.out, exist_ok=True)
    seeds = [int(s) for s in args.seeds.split(",")]
    variants = args.variants.split(",")
    for v in variants:
        if v not in SWITCHES and v not in ("adam", "adam-longer"):
            raise SystemExit(f"unknown variant '{v}'; variants: {', '.join(DEFAULT_VARIANTS)}")
    budget = budget_of(args)

    # Phase 1: Adam's learning rate, seed 0.
    grid = [float(x) for x in args.adam_grid.split(",")]
    best_lr = None
    if any(v.startswith("adam") for v in variants):
        run_all(args, [(f"adam-lr{lr:g}", ["matrix_optimizer=adam", f"adam_matrix_lr={lr:g}"],
                        seeds[0]) for lr in grid])
        ranked = []
        for lr in grid:
            r = result(args, f"adam-lr{lr:g}", seeds[0])
            ranked.append(((0 if r["reached"] else 1, r["steps"], r["val_loss"]), lr, r))
        ranked.sort()
        best_lr = ranked[0][1]
        print(f"Adam matrix learning rate grid (seed {seeds[0]}, budget {budget} steps):",
              file=sys.stderr)
        for _, lr, r in sorted(ranked, key=lambda x: x[1]):
            print(f"  adam_matrix_lr={lr:g}: reached={r['reached']} steps={r['steps']} "
                  f"val_loss={r['val_loss']:.4f}", file=sys.stderr)

    def sets_of(v: str) -> list[str]:
        if v == "adam":
            return ["matrix_optimizer=adam", f"adam_matrix_lr={best_lr:g}"]
        if v == "adam-longer":
            return ["matrix_optimizer=adam", f"adam_matrix_lr={best_lr:g}",
                    f"num_iterations={math.ceil(budget / 0.75)}"]
        return SWITCHES[v]

    # Phase 2: every variant, every seed.
    run_all(args, [(v, sets_of(v), s) for v in variants for s in seeds])

    rows = []
    results = os.path.join(args.out, args.results)
    with open(results + ".tmp", "w") as f:
        for v in variants:
            for s in seeds:
                r = result(args, v, s)
                f.write(json.dumps({**r, "variant": v, "sets": sets_of(v)}) + "\n")
                rows.append((v, r))
    os.replace(results + ".tmp", results)

    record_loss = [r["val_loss"] for v, r in rows if v == "record"]
    print(f"Target {args.target}, budget {budget} steps, seeds {args.seeds}, config {args.config} "
          f"{' '.join('--set ' + s for s in args.set)}; {args.jobs} runs at a time, "
          f"{args.threads} thread(s) each; Adam lr {best_lr}")
    print()
    print("| variant | sets | reached | steps to target | seconds to target | final val loss "
          "| Δ loss vs record | load |")
    print("|---|---|---|---|---|---|---|---|")
    for v in variants:
        rs = [r for vv, r in rows if vv == v]
        hit = [r for r in rs if r["reached"]]
        losses = [r["val_loss"] for r in rs]
        delta = (statistics.mean(losses) - statistics.mean(record_loss)) if record_loss else float("nan")
        loads = [r.get("loadavg_before", -1) for r in rs]
        print(f"| {v} | {' '.join(sets_of(v)) or '—'} | {len(hit)}/{len(rs)} "
              f"| {mean_std([r['steps'] for r in hit])} | {mean_std([r['train_seconds'] for r in hit])} "
              f"| {mean_std(losses)} | {delta:+.4f} | {min(loads):.1f}–{max(loads):.1f} |")
    print(json.dumps({"budget": budget, "adam_lr": best_lr, "rows": [dict(variant=v, **r) for v, r in rows]}))


if __name__ == "__main__":
    main()
