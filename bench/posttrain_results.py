#!/usr/bin/env python3
"""The post-training results table (issue 18): held-out pass@1 per task before SFT, after SFT,
after DPO and after RL, over seeds, from the runs' metrics.jsonl (the "eval" lines every stage
writes). Runs are found as ROOT/sft-sSEED, ROOT/dpo-sSEED, ROOT/rl-sSEED (bench/posttrain_pipeline.sh
makes them). Prints a Markdown table: mean ± standard deviation over the seeds, and each seed.

  /usr/bin/python3 bench/posttrain_results.py --root /work/pt --seeds 0,1,2
"""
import argparse
import json
import os
import statistics


def evals(run_dir):
    """The run's eval lines, in order: [(step, {cell: pass@1}, overall)]."""
    out = []
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        for line in f:
            j = json.loads(line)
            if "eval" in j and "cells" in j["eval"]:
                cells = {k: v["pass@1"] for k, v in j["eval"]["cells"].items()}
                out.append((j["step"], cells, j["eval"]["pass@1"]))
    if not out:
        raise SystemExit(f"{run_dir}: no evaluation lines in metrics.jsonl")
    return out


def spread(values):
    if len(values) == 1:
        return f"{values[0]:.3f}"
    return f"{statistics.mean(values):.3f} ± {statistics.stdev(values):.3f}"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--root", required=True)
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--sft", default="sft-s{seed}")
    ap.add_argument("--dpo", default="dpo-s{seed}")
    ap.add_argument("--rl", default="rl-s{seed}")
    args = ap.parse_args()
    seeds = [int(s) for s in args.seeds.split(",")]
    # stage -> seed -> {cell: pass@1}
    stages = {"before SFT": {}, "after SFT": {}, "after DPO": {}, "after RL": {}}
    for s in seeds:
        sft = evals(os.path.join(args.root, args.sft.format(seed=s)))
        stages["before SFT"][s] = sft[0][1]
        stages["after SFT"][s] = sft[-1][1]
        for name, pattern in (("after DPO", args.dpo), ("after RL", args.rl)):
            d = os.path.join(args.root, pattern.format(seed=s))
            if os.path.isdir(d):
                stages[name][s] = evals(d)[-1][1]
    cells = list(stages["after SFT"][seeds[0]].keys())
    print("| stage | " + " | ".join(cells) + " |")
    print("|---|" + "---|" * len(cells))
    for name, by_seed in stages.items():
        if not by_seed:
            continue
        row = []
        for cell in cells:
            vals = [by_seed[s][cell] for s in seeds if s in by_seed and cell in by_seed[s]]
            row.append(spread(vals) if vals else "—")
        print(f"| {name} | " + " | ".join(row) + " |")
    print()
    print("Per seed:")
    for name, by_seed in stages.items():
        for s in seeds:
            if s in by_seed:
                vals = ", ".join(f"{c} {by_seed[s].get(c, float('nan')):.2f}" for c in cells if c in by_seed[s])
                print(f"- {name}, seed {s}: {vals}")


if __name__ == "__main__":
    main()
