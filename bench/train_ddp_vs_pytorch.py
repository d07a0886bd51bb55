#!/usr/bin/python3
"""Data-parallel training on this machine: nanogpt on 2 MPI ranks against itself on 1 process
and against PyTorch DistributedDataParallel, on one configuration.

Usage (run with /usr/bin/python3, which has Debian's torch):
  bench/train_ddp_vs_pytorch.py [--nanogpt build/nanogpt] [--preset cpu|speedrun] [--seq-len T]
      [--tokens-per-step N] [--set key=value ...] [--steps 5] [--warmup 2] [--pytorch-steps N]
      [--pytorch-warmup 1] [--window W] [--precision config|fp32|bf16|auto]
      [--pytorch-mode both|fp32|bf16] [--ranks 2] [--mpirun mpirun] [--mpirun-args "..."]
      [--omp-wait-policy auto|active|passive|default] [--micro-batch N] [--skip-pytorch]

Runs back to back, on the configuration `nanogpt train --print-config` resolves (the preset plus
--set; speedrun defaults to T = 1024 and 8 sequences per step, as bench/train_vs_pytorch.py,
whose helpers this script imports):
  (a) ours, 1 process x R threads:  NANOGPT_THREADS=R nanogpt bench train ...
  (b) ours, R ranks x 1 thread:     mpirun ... -np R -x NANOGPT_THREADS=1 nanogpt bench train ...
  (c) PyTorch DDP, R x 1 thread:    pytorch_train_step.py --ddp-ranks R --threads-per-rank 1
      (gloo; the better of fp32 and bf16 autocast, each in its own set of processes)
and prints the load average before and after each, the CPU, tokens/s of each, the ratios
(b)/(a) (issue 11's target: >= 0.9) and (b)/(c) (target: >= 5), and from (b)'s JSON line the
communication fields of a distributed `bench train` (comm_exposed_s, comm_hidden_s,
seconds per step; comm_bytes_per_rank_per_step) with the exposed share of
the median step (target: <= 10%), "n/a" where the line has no such field.

If (b)'s lines carry no world size ("ranks"/"world_size"), `bench train` predates distributed
training and every rank trained the whole batch alone: the script says so and still reports
the first line (rank 0's), whose ratio then means nothing.

The last line of output is one JSON object with everything above.
"""
from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from train_vs_pytorch import REPO, config_sets, json_lines, resolve_config, run  # noqa: E402

TARGET_RANKS_VS_THREADS = 0.9
TARGET_VS_PYTORCH = 5.0
TARGET_EXPOSED_SHARE = 0.10
DEFAULT_MPIRUN_ARGS = ("--allow-run-as-root --oversubscribe --bind-to none "
                       "--mca btl_vader_single_copy_mechanism none")
COMM_FIELDS = ("comm_exposed_s", "comm_hidden_s",
               "comm_bytes_per_rank_per_step", "median_step_s")


def load() -> float:
    return os.getloadavg()[0]


def cpu_name(nanogpt: str) -> str:
    out = subprocess.run([nanogpt, "info"], stdout=subprocess.PIPE, text=True).stdout
    for line in out.splitlines():
        if line.startswith("cpu:"):
            return line[len("cpu:"):].split(";")[0].strip()  # "MODEL, N logical cores"
    return "?"


def bench_train_cmd(args, sets: list[str], window: int) -> list[str]:
    cmd = [args.nanogpt, "bench", "train", "--config", args.preset, "--steps", str(args.steps),
           "--warmup", str(args.warmup), "--window", str(window)]
    for s in sets:
        cmd += ["--set", s]
    if args.precision != "config":
        cmd += ["--set", f"precision={args.precision}"]
    return cmd


def timed(what: str, fn):
    """Runs fn(), printing the load average before and after; returns (result, before, after)."""
    before = load()
    print(f"--- {what}: load {before:.2f}", file=sys.stderr, flush=True)
    result = fn()
    after = load()
    print(f"--- {what}: done, load {after:.2f}", file=sys.stderr, flush=True)
    return result, before, after


def run_ours_threads(args, sets, window) -> dict | None:
    lines = json_lines(run(bench_train_cmd(args, sets, window), args.ranks,
                           f"nanogpt bench train (1 x {args.ranks})") or "")
    return lines[-1] if lines else None


def run_ours_ranks(args, sets, window) -> tuple[dict | None, bool, int]:
    """(rank 0's line, whether `bench train` ran distributed, how many lines came)."""
    cmd = ([args.mpirun] + shlex.split(args.mpirun_args) +
           ["-np", str(args.ranks), "-x", "NANOGPT_THREADS=1"] +
           bench_train_cmd(args, sets, window))
    lines = [j for j in json_lines(run(cmd, 1, f"mpirun nanogpt bench train ({args.ranks} x 1)")
                                   or "") if "tokens_per_s" in j]
    if not lines:
        return None, False, 0
    ranked = [j for j in lines if j.get("rank") == 0]
    line = ranked[0] if ranked else lines[0]
    distributed = any(k in line and line[k] == args.ranks for k in ("ranks", "world_size"))
    return line, distributed, len(lines)


def run_pytorch_ddp(args, sets, window) -> list[dict]:
    cmd = [sys.executable, os.path.join(REPO, "bench", "pytorch_train_step.py"),
           "--preset", args.preset, "--nanogpt", args.nanogpt, "--mode", args.pytorch_mode,
           "--ddp-ranks", str(args.ranks), "--threads-per-rank", "1",
           "--steps", str(args.pytorch_steps or args.steps), "--warmup", str(args.pytorch_warmup),
           "--window", str(window), "--omp-wait-policy", args.omp_wait_policy]
    if args.micro_batch:
        cmd += ["--micro-batch", str(args.micro_batch)]
    for s in sets:
        cmd += ["--set", s]
    return [j for j in json_lines(run(cmd, 1, "pytorch_train_step.py --ddp-ranks") or "")
            if not j.get("summary") and "tokens_per_s" in j]


def fmt(x, spec: str = ".3f") -> str:
    return "n/a" if x is None else format(x, spec)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--nanogpt", default=os.path.join(REPO, "build", "nanogpt"))
    ap.add_argument("--preset", default="cpu", choices=["cpu", "speedrun"])
    ap.add_argument("--seq-len", type=int, default=0,
                    help="train_seq_len (default: the preset's for cpu, 1024 for speedrun)")
    ap.add_argument("--tokens-per-step", type=int, default=0,
                    help="the global batch (default: 8 sequences when --seq-len is given or "
                         "implied, else the preset's)")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="further configuration overrides for every side (repeatable)")
    ap.add_argument("--steps", type=int, default=5, help="timed steps of each side")
    ap.add_argument("--warmup", type=int, default=2, help="untimed steps of nanogpt")
    ap.add_argument("--pytorch-steps", type=int, default=0, help="default: --steps")
    ap.add_argument("--pytorch-warmup", type=int, default=1)
    ap.add_argument("--window", type=int, default=0,
                    help="long layers' attention window in blocks (default: whole sequence)")
    ap.add_argument("--precision", default="config",
                    help="ours: fp32, bf16 or auto (default: the configuration's)")
    ap.add_argument("--pytorch-mode", default="both", choices=["both", "fp32", "bf16"])
    ap.add_argument("--ranks", type=int, default=2,
                    help="R: ranks of (b) and (c), threads of (a) (default 2)")
    ap.add_argument("--mpirun", default="mpirun")
    ap.add_argument("--mpirun-args", default=DEFAULT_MPIRUN_ARGS,
                    help=f"flags before -np (default: {DEFAULT_MPIRUN_ARGS})")
    ap.add_argument("--omp-wait-policy", default="auto",
                    choices=["auto", "active", "passive", "default"])
    ap.add_argument("--micro-batch", type=int, default=0,
                    help="PyTorch's sequences per forward/backward per rank (default: its own)")
    ap.add_argument("--skip-pytorch", action="store_true", help="run (a) and (b) only")
    args = ap.parse_args()
    if args.ranks < 1:
        ap.error("--ranks >= 1")

    sets = config_sets(args)
    cfg = resolve_config(args, sets)
    T = cfg["train_seq_len"]
    window = args.window or T // cfg["block_size"]
    cpu = cpu_name(args.nanogpt)
    R = args.ranks

    a, a_before, a_after = timed(f"(a) nanogpt 1 x {R}", lambda: run_ours_threads(args, sets,
                                                                                 window))
    (b, b_distributed, b_lines), b_before, b_after = timed(
        f"(b) nanogpt {R} x 1 (mpirun)", lambda: run_ours_ranks(args, sets, window))
    c_modes, c_before, c_after = [], None, None
    if not args.skip_pytorch:
        c_modes, c_before, c_after = timed(f"(c) pytorch DDP {R} x 1",
                                           lambda: run_pytorch_ddp(args, sets, window))
    c = max(c_modes, key=lambda r: r["tokens_per_s"]) if c_modes else None

    print(f"\n{args.preset}: T={T}, {cfg['tokens_per_step']} tokens/step (global), window "
          f"{window} blocks; cpu: {cpu}")
    rows = [(f"(a) nanogpt 1 x {R}", a, a_before, a_after),
            (f"(b) nanogpt {R} x 1", b, b_before, b_after)]
    rows += [(f"(c) pytorch ddp {R} x 1 {r['mode']}", r, c_before, c_after) for r in c_modes]
    print(f"{'':30} {'tokens/s':>10} {'step s':>8} {'precision':>9} {'load before':>12} "
          f"{'load after':>11}")
    for name, r, lb, la in rows:
        if r is None:
            print(f"{name:30} {'failed':>10}")
            continue
        print(f"{name:30} {r['tokens_per_s']:10.1f} {r['median_step_s']:8.3f} "
              f"{str(r.get('precision', r.get('mode', '?'))):>9} {fmt(lb, '.2f'):>12} "
              f"{fmt(la, '.2f'):>11}")
    if b is not None and not b_distributed:
        print(f"warning: (b)'s line has no world size of {R}: `bench train` did not run "
              f"distributed ({b_lines} line(s) came, one per rank?), each rank trained the whole "
              f"batch alone; ratios with (b) mean nothing until it does", file=sys.stderr)

    ratio_ba = b["tokens_per_s"] / a["tokens_per_s"] if a and b else None
    ratio_bc = b["tokens_per_s"] / c["tokens_per_s"] if b and c else None
    comm = {k: (b.get(k) if b else None) for k in COMM_FIELDS}
    # The line's own share when it gives one (bench train: exposed seconds per step / median).
    exposed_share = b.get("comm_exposed_share") if b else None
    if exposed_share is None and comm["comm_exposed_s"] is not None and comm["median_step_s"]:
        exposed_share = comm["comm_exposed_s"] / comm["median_step_s"]
    print(f"ratio (b)/(a), {R} ranks x 1 thread over 1 process x {R} threads: {fmt(ratio_ba)} "
          f"(target >= {TARGET_RANKS_VS_THREADS})")
    print(f"ratio (b)/(c), ours over PyTorch DDP{' ' + c['mode'] if c else ''}: {fmt(ratio_bc)} "
          f"(target >= {TARGET_VS_PYTORCH:.0f})")
    print(f"(b) per step: exposed communication {fmt(comm['comm_exposed_s'], '.4f')} s, hidden "
          f"{fmt(comm['comm_hidden_s'], '.4f')} s, {fmt(comm['comm_bytes_per_rank_per_step'], '.0f')} bytes sent per rank; exposed "
          f"share of the step "
          f"{'n/a' if exposed_share is None else format(100 * exposed_share, '.1f') + '%'} "
          f"(target <= {100 * TARGET_EXPOSED_SHARE:.0f}%)")

    def pick(r, keys=("tokens_per_s", "median_step_s", "precision", "mode", "threads",
                      "loadavg_before", "loadavg_after")):
        return {k: r.get(k) for k in keys if k in r} if r else None

    print(json.dumps({
        "bench": "train_ddp_vs_pytorch", "preset": args.preset, "seq_len": T,
        "tokens_per_step": cfg["tokens_per_step"], "window_blocks": window, "ranks": R,
        "sets": sets, "cpu": cpu,
        "ours_threads": dict(pick(a) or {}, load_before=a_before, load_after=a_after),
        "ours_ranks": dict(pick(b) or {}, load_before=b_before, load_after=b_after,
                           distributed=b_distributed, **comm),
        "pytorch_ddp": {r["mode"]: pick(r, ("tokens_per_s", "median_step_s", "micro_batch",
                                             "omp_wait_policy", "loss_first", "loss_last"))
                        for r in c_modes},
        "pytorch_ddp_best_mode": c["mode"] if c else None,
        "pytorch_load_before": c_before, "pytorch_load_after": c_after,
        "ratio_ranks_vs_threads": ratio_ba, "target_ratio_ranks_vs_threads":
            TARGET_RANKS_VS_THREADS,
        "ratio_vs_pytorch_ddp": ratio_bc, "target_ratio_vs_pytorch_ddp": TARGET_VS_PYTORCH,
        "comm_exposed_share": exposed_share, "target_comm_exposed_share": TARGET_EXPOSED_SHARE,
    }), flush=True)


if __name__ == "__main__":
    main()
