#!/usr/bin/python3
"""Training-step throughput of nanogpt against PyTorch on the same configuration.

Usage (run with /usr/bin/python3, which has Debian's torch):
  bench/train_vs_pytorch.py [--nanogpt build/nanogpt] [--preset cpu|speedrun] [--seq-len T]
      [--tokens-per-step N] [--set key=value ...] [--steps 5] [--warmup 2] [--pytorch-steps N]
      [--window W] [--precision auto|fp32|bf16|fp32,bf16] [--pytorch-mode both|fp32|bf16]
      [--threads 2] [--omp-wait-policy auto|active|passive|default] [--micro-batch N]
      [--best-bf16-gflops X | --gemm-bench build/gemm_vs_peers]
      [--ours-json FILE] [--pytorch-json FILE] [--rounds R]

Runs `nanogpt bench train` and bench/pytorch_train_step.py (fp32 and bf16 autocast, each in
its own process) on one configuration, resolved by the nanogpt binary for both, with the same
attention window and thread count, and prints tokens/s of each, our ratio to PyTorch's better
mode (issue 14's target: >= 5x on `cpu` and on `speedrun` at sequence length 1024) and our
TFLOP/s. With --best-bf16-gflops, or --gemm-bench to measure it here (gemm_vs_peers on this
preset's shapes: the fastest bf16 product of ours or oneDNN's), it also prints that TFLOP/s as a
fraction of the best bf16 GEMM rate of this machine.

Defaults: preset cpu as it is (T = 512, 4096 tokens/step); speedrun at T = 1024 with 8 sequences
per step (the seed's 8 GPUs × one sequence), since the seed's 48k-token sequences and 393k-token
steps take minutes per step on two cores. --ours-json / --pytorch-json read results saved from an
earlier run (the JSON lines each benchmark printed) instead of running that side.

--rounds R runs the pair R times, ours then the peer each round, back to back: on a shared host
whose speed moves by tens of percent within minutes, one pair's ratio is one sample. Each round's
ratio (our best precision against the peer's best mode that round) and load are printed; the
headline ratio is each side's best round, as bench/evals_vs_pytorch.py reports it. Each round
also prints the rate the host gave our bf16 micro-kernel alone just before and after each side
(`nanogpt bench kernel`; bench train's kernel_rate_before/after), and flags a round in which it
moved by more than 1.5x: the AMX Xeon's matrix unit was seen to flip between ~1.9 and ~0.6
TFLOP/s per thread within seconds, which no code change explains.

The last line of output is one JSON object with everything above and the load averages: the
machine may be shared, and a figure measured under load says so.
"""
from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TARGET_RATIO = 5.0


def json_lines(text: str) -> list[dict]:
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("{"):
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError:
                pass
    return out


def run(cmd: list[str], env_threads: int, what: str) -> str | None:
    env = dict(os.environ, NANOGPT_THREADS=str(env_threads), OMP_NUM_THREADS=str(env_threads),
               OPENBLAS_NUM_THREADS=str(env_threads))
    print(f"$ {shlex.join(cmd)}", file=sys.stderr, flush=True)
    p = subprocess.run(cmd, stdout=subprocess.PIPE, text=True, env=env)
    if p.returncode != 0:
        print(f"train_vs_pytorch: {what} failed (exit {p.returncode})", file=sys.stderr)
        return None
    return p.stdout


def config_sets(args) -> list[str]:
    """The --set list both sides get: sequence length, batch, and the user's overrides."""
    sets = []
    seq_len = args.seq_len or (1024 if args.preset == "speedrun" else 0)
    if seq_len:
        sets.append(f"train_seq_len={seq_len}")
        tokens = args.tokens_per_step or 8 * seq_len
        sets.append(f"tokens_per_step={tokens}")
    elif args.tokens_per_step:
        sets.append(f"tokens_per_step={args.tokens_per_step}")
    return sets + args.set


def resolve_config(args, sets: list[str]) -> dict:
    cmd = [args.nanogpt, "train", "--config", args.preset, "--print-config"]
    for s in sets:
        cmd += ["--set", s]
    return json.loads(subprocess.run(cmd, check=True, stdout=subprocess.PIPE, text=True).stdout)


def run_ours(args, sets: list[str], window: int, precision: str) -> dict | None:
    cmd = [args.nanogpt, "bench", "train", "--config", args.preset, "--steps", str(args.steps),
           "--warmup", str(args.warmup), "--window", str(window)]
    for s in sets:
        cmd += ["--set", s]
    if precision != "config":
        cmd += ["--set", f"precision={precision}"]
    out = run(cmd, args.threads, f"nanogpt bench train ({precision})")
    lines = json_lines(out or "")
    return lines[-1] if lines else None


def run_pytorch(args, sets: list[str], window: int) -> list[dict]:
    cmd = [sys.executable, os.path.join(REPO, "bench", "pytorch_train_step.py"),
           "--preset", args.preset, "--nanogpt", args.nanogpt, "--mode", args.pytorch_mode,
           "--steps", str(args.pytorch_steps or args.steps), "--warmup", str(args.pytorch_warmup),
           "--threads", str(args.threads), "--window", str(window),
           "--omp-wait-policy", args.omp_wait_policy]
    if args.micro_batch:
        cmd += ["--micro-batch", str(args.micro_batch)]
    for s in sets:
        cmd += ["--set", s]
    return json_lines(run(cmd, args.threads, "pytorch_train_step.py") or "")


def probe_kernel(args) -> float | None:
    """Median GFLOP/s per thread the host gives our bf16 micro-kernel now (nanogpt bench kernel).

    Taken before and after the peer's run, as bench train takes it around ours: on a host that
    changes the matrix unit's rate by 3x within seconds, a round whose two sides ran in
    different states compares the host, not the code."""
    out = run([args.nanogpt, "bench", "kernel", "--seconds", "0.25"], 1, "nanogpt bench kernel")
    lines = json_lines(out or "")
    return lines[-1]["kernel_rate"]["median_gflops"] if lines else None


def fmt_rates(rates: list[float]) -> str:
    return "/".join(f"{g:.0f}" for g in rates) if rates else "-"


def kernel_rates(r: dict) -> list[float]:
    return [r[k]["median_gflops"] for k in ("kernel_rate_before", "kernel_rate_after") if k in r]


def best_bf16_gemm(args, seq_len: int) -> tuple[float | None, str]:
    if args.best_bf16_gflops:
        return args.best_bf16_gflops, "given"
    if not args.gemm_bench:
        return None, ""
    cmd = [args.gemm_bench, "--preset", args.preset, "--seq-len", str(seq_len), "--dtype", "bf16",
           "--json"]
    summaries = [j for j in json_lines(run(cmd, args.threads, "gemm_vs_peers") or "")
                 if j.get("summary")]
    if not summaries:
        return None, ""
    return summaries[-1]["best_bf16_gflops"], "gemm_vs_peers"


def read_json_file(path: str) -> list[dict]:
    with open(path, encoding="utf-8") as f:
        return json_lines(f.read())


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--nanogpt", default=os.path.join(REPO, "build", "nanogpt"))
    ap.add_argument("--preset", default="cpu", choices=["cpu", "speedrun"])
    ap.add_argument("--seq-len", type=int, default=0,
                    help="train_seq_len (default: the preset's for cpu, 1024 for speedrun)")
    ap.add_argument("--tokens-per-step", type=int, default=0,
                    help="default: 8 sequences when --seq-len is given or implied")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="further configuration overrides for both sides (repeatable)")
    ap.add_argument("--steps", type=int, default=5, help="timed steps of each side")
    ap.add_argument("--warmup", type=int, default=2, help="untimed steps of nanogpt")
    ap.add_argument("--pytorch-steps", type=int, default=0, help="default: --steps")
    ap.add_argument("--pytorch-warmup", type=int, default=1)
    ap.add_argument("--window", type=int, default=0,
                    help="long layers' attention window in blocks (default: whole sequence)")
    ap.add_argument("--precision", default="config",
                    help="our precision(s), comma-separated: fp32, bf16, auto (default: the "
                         "configuration's, i.e. auto = bf16 on a CPU with BF16)")
    ap.add_argument("--pytorch-mode", default="both", choices=["both", "fp32", "bf16"])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--omp-wait-policy", default="auto",
                    choices=["auto", "active", "passive", "default"],
                    help="PyTorch's OpenMP idle threads (see pytorch_train_step.py): auto = "
                         "passive when other work keeps the cores busy")
    ap.add_argument("--micro-batch", type=int, default=0,
                    help="PyTorch's sequences per forward/backward (default: its own)")
    ap.add_argument("--best-bf16-gflops", type=float, default=0.0,
                    help="best bf16 GEMM GFLOP/s measured on this machine")
    ap.add_argument("--gemm-bench", help="gemm_vs_peers binary: measure that rate now")
    ap.add_argument("--ours-json", help="use these nanogpt bench train results, don't run it")
    ap.add_argument("--pytorch-json", help="use these pytorch_train_step results, don't run it")
    ap.add_argument("--rounds", type=int, default=1,
                    help="run ours then the peer this many times, back to back (default 1)")
    args = ap.parse_args()

    sets = config_sets(args)
    cfg = resolve_config(args, sets)
    T = cfg["train_seq_len"]
    window = args.window or T // cfg["block_size"]
    if args.rounds < 1:
        ap.error("--rounds must be at least 1")
    if args.rounds > 1 and (args.ours_json or args.pytorch_json):
        ap.error("--rounds runs both sides; it cannot be combined with --ours-json/--pytorch-json")
    load_before = os.getloadavg()[0]

    # Per round: ours (each precision asked for), then the peer (each mode), back to back.
    ours, torch_modes, rounds = [], [], []
    for k in range(args.rounds):
        round_load = os.getloadavg()[0]
        if args.ours_json:
            ours_k = [j for j in read_json_file(args.ours_json) if "tokens_per_s" in j]
        else:
            ours_k = []
            for p in args.precision.split(","):
                r = run_ours(args, sets, window, p.strip())
                if r is not None:
                    ours_k.append(r)
        torch_kernel = []
        if args.pytorch_json:
            torch_lines = read_json_file(args.pytorch_json)
        else:
            torch_kernel.append(probe_kernel(args))
            torch_lines = run_pytorch(args, sets, window)
            torch_kernel.append(probe_kernel(args))
        torch_k = [j for j in torch_lines if not j.get("summary") and "tokens_per_s" in j]
        ours += ours_k
        torch_modes += torch_k
        if ours_k and torch_k:
            o = max(r["tokens_per_s"] for r in ours_k)
            t = max(r["tokens_per_s"] for r in torch_k)
            o_best = max(ours_k, key=lambda r: r["tokens_per_s"])
            rounds.append({"round": k + 1, "ours_tokens_per_s": o, "pytorch_tokens_per_s": t,
                           "ratio": o / t, "load": [round_load, os.getloadavg()[0]],
                           "ours_kernel_gflops": kernel_rates(o_best),
                           "pytorch_kernel_gflops": [g for g in torch_kernel if g is not None]})
    # Each precision's and each mode's best round stand for it below.
    ours = [max((r for r in ours if r.get("precision") == p), key=lambda r: r["tokens_per_s"])
            for p in dict.fromkeys(r.get("precision") for r in ours)]
    torch_modes = [max((r for r in torch_modes if r["mode"] == m), key=lambda r: r["tokens_per_s"])
                   for m in dict.fromkeys(r["mode"] for r in torch_modes)]
    gemm_best, gemm_source = best_bf16_gemm(args, T)
    load_after = os.getloadavg()[0]

    # Saved results may come from another configuration: a ratio across shapes means nothing.
    for r in ours + torch_modes:
        got = (r.get("seq_len"), r.get("tokens_per_step"))
        if got != (T, cfg["tokens_per_step"]):
            print(f"train_vs_pytorch: warning: a result has (seq_len, tokens_per_step) = {got}, "
                  f"this configuration {(T, cfg['tokens_per_step'])}", file=sys.stderr)
    torch_best = max(torch_modes, key=lambda r: r["tokens_per_s"]) if torch_modes else None
    ours_best = max(ours, key=lambda r: r["tokens_per_s"]) if ours else None

    print(f"\n{args.preset}: T={T}, {cfg['tokens_per_step']} tokens/step, window {window} blocks, "
          f"{args.threads} threads, load {load_before:.2f} -> {load_after:.2f}")
    if args.rounds > 1:
        for r in rounds:
            print(f"round {r['round']}: ours {r['ours_tokens_per_s']:.1f}, pytorch "
                  f"{r['pytorch_tokens_per_s']:.1f} tokens/s, ratio {r['ratio']:.2f}x "
                  f"(load {r['load'][0]:.2f} -> {r['load'][1]:.2f}; "
                  f"kernel GFLOP/s per thread around ours {fmt_rates(r['ours_kernel_gflops'])}, "
                  f"around pytorch's {fmt_rates(r['pytorch_kernel_gflops'])})")
            every = r["ours_kernel_gflops"] + r["pytorch_kernel_gflops"]
            if every and max(every) > 1.5 * min(every):
                print(f"  round {r['round']}: the host changed the micro-kernel's rate "
                      f"{min(every):.0f} -> {max(every):.0f} GFLOP/s during the round: its ratio "
                      "compares host states as much as code")
        print("best round of each side:")
    print(f"{'':24} {'tokens/s':>10} {'step s':>8} {'TFLOP/s':>8} {'model TFLOP/s':>14}")
    for r in ours:
        print(f"{'nanogpt ' + str(r.get('precision', '?')):24} {r['tokens_per_s']:10.1f} "
              f"{r['median_step_s']:8.3f} {r.get('tflops', float('nan')):8.3f} "
              f"{r.get('model_tflops', float('nan')):14.3f}")
    for r in torch_modes:
        print(f"{'pytorch ' + r['mode']:24} {r['tokens_per_s']:10.1f} {r['median_step_s']:8.3f} "
              f"{r['tflops']:8.3f} {r['model_tflops']:14.3f}")

    summary = {
        "bench": "train_vs_pytorch", "preset": args.preset, "seq_len": T,
        "tokens_per_step": cfg["tokens_per_step"], "window_blocks": window,
        "threads": args.threads, "sets": sets,
        "ours": {r.get("precision", "?"): {k: r.get(k) for k in (
            "tokens_per_s", "median_step_s", "tflops", "model_tflops", "loadavg_before",
            "loadavg_after")} for r in ours},
        "pytorch": {r["mode"]: {k: r.get(k) for k in (
            "tokens_per_s", "median_step_s", "tflops", "model_tflops", "micro_batch",
            "omp_wait_policy", "loadavg_before", "loadavg_after")} for r in torch_modes},
        "pytorch_best_mode": torch_best["mode"] if torch_best else None,
        "target_ratio": TARGET_RATIO,
        "loadavg_before": load_before, "loadavg_after": load_after,
        "rounds": rounds,
    }
    if ours_best and torch_best:
        ratio = ours_best["tokens_per_s"] / torch_best["tokens_per_s"]
        summary["ratio"] = ratio
        summary["ratio_by_precision"] = {
            r.get("precision", "?"): r["tokens_per_s"] / torch_best["tokens_per_s"] for r in ours}
        print(f"ratio nanogpt {ours_best.get('precision', '?')} / pytorch {torch_best['mode']} "
              f"(best of each): {ratio:.2f}x (target {TARGET_RATIO:.0f}x)")
        if len(rounds) > 1:
            ratios = [r["ratio"] for r in rounds]
            print(f"single rounds: {min(ratios):.2f}x to {max(ratios):.2f}x")
    elif not ours:
        print("nanogpt bench train gave no result: no ratio")
    if gemm_best and ours_best and "tflops" in ours_best:
        frac = ours_best["tflops"] * 1e3 / gemm_best
        summary["best_bf16_gemm_gflops"] = gemm_best
        summary["best_bf16_gemm_source"] = gemm_source
        summary["fraction_of_best_bf16_gemm"] = frac
        if "model_tflops" in ours_best:
            summary["model_fraction_of_best_bf16_gemm"] = (ours_best["model_tflops"] * 1e3
                                                           / gemm_best)
        print(f"nanogpt {ours_best['tflops']:.3f} TFLOP/s = {100 * frac:.1f}% of the best bf16 "
              f"GEMM rate measured here ({gemm_best:.1f} GFLOP/s, {gemm_source})")
    print(json.dumps(summary), flush=True)


if __name__ == "__main__":
    main()
