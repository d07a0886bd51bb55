#!/usr/bin/env python3
"""Two builds of nanogpt, profiled side by side: which ops one made faster than the other.

A change to a kernel moves a few ops by a few percent, and a shared host moves the whole step by
as much from one minute to the next. So the two binaries run in alternated pairs (A then B, then
B then A, ...), each run `nanogpt bench train ... --profile`, and the figure for an op is the
median over the runs of its time per run, with how many pairs B won. Every run's load average,
kernel probe (`kernel_rate_before`: what the host gave one thread just before the steps) and
loss are printed, so a pair the host slowed can be seen, and a change that moved the loss bits
is said.

    /usr/bin/python3 bench/ab_profile.py --a /tmp/old/nanogpt --b build/nanogpt --pairs 6
    /usr/bin/python3 bench/ab_profile.py --a build/nanogpt --b build/nanogpt \\
        --env-b NANOGPT_ISA=avx512 --pairs 4 -- --config cpu --steps 2

Arguments after `--` replace the default `bench train` arguments (the `cpu` preset at 8
sequences of 1,024 tokens, 4 steps). Times are per run (all its timed steps), in ms, of each
profile scope's self time: its duration less that of the scopes nested in it on its thread,
as `--profile`'s own table gives it; and `train_step (total)`, the timed steps' wall time.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

DEFAULT_TRAIN_ARGS = ["--config", "cpu", "--set", "train_seq_len=1024",
                      "--set", "tokens_per_step=8192", "--steps", "4"]


def fail(message):
    print(f"ab_profile: {message}", file=sys.stderr)
    sys.exit(1)


def parse_env(pairs, flag):
    env = {}
    for item in pairs:
        key, sep, value = item.partition("=")
        if not sep or not key:
            fail(f"{flag} {item!r}: give KEY=VALUE (for example {flag} NANOGPT_ISA=avx512)")
        env[key] = value
    return env


def self_times(profile_path):
    """Self time in ms per scope name, summed over the run: each complete event's duration less
    the durations of the events nested directly in it on the same thread."""
    try:
        with open(profile_path) as f:
            trace = json.load(f)
    except (OSError, json.JSONDecodeError) as e:
        fail(f"cannot read the profile {profile_path}: {e}")
    events = trace.get("traceEvents", []) if isinstance(trace, dict) else trace
    by_thread = {}
    for e in events:
        if e.get("ph") == "X":
            by_thread.setdefault(e.get("tid", 0), []).append(e)
    totals = {}
    # The steps' wall time, whole: train_step's total, not its self time.
    totals["train_step (total)"] = sum(e["dur"] for spans in by_thread.values() for e in spans
                                       if e["name"] == "train_step") / 1000.0
    for spans in by_thread.values():
        # Parents first where two start together: the longer one holds the other.
        spans.sort(key=lambda e: (e["ts"], -e["dur"]))
        stack = []  # [end, name, self]
        def close(entry):
            totals[entry[1]] = totals.get(entry[1], 0.0) + entry[2] / 1000.0
        for e in spans:
            start, dur = e["ts"], e["dur"]
            while stack and start >= stack[-1][0]:
                close(stack.pop())
            if stack:
                stack[-1][2] -= dur
            stack.append([start + dur, e["name"], dur])
        while stack:
            close(stack.pop())
    return totals


def run_once(binary, train_args, env, profile_path):
    command = [binary, "bench", "train", *train_args, "--profile", profile_path]
    try:
        done = subprocess.run(command, env=env, capture_output=True, text=True)
    except OSError as e:
        fail(f"cannot run {binary}: {e}")
    if done.returncode != 0:
        tail = "\n".join(done.stderr.strip().splitlines()[-5:])
        fail(f"`{' '.join(command)}` exited with {done.returncode}:\n{tail}")
    lines = [l for l in done.stdout.splitlines() if l.startswith("{")]
    if not lines:
        fail(f"`{' '.join(command)}` printed no JSON line")
    result = json.loads(lines[-1])
    result["self_ms"] = self_times(profile_path)
    return result


def fmt(x):
    return f"{x:,.1f}"


def main():
    argv = sys.argv[1:]
    train_args = DEFAULT_TRAIN_ARGS
    if "--" in argv:
        cut = argv.index("--")
        argv, train_args = argv[:cut], argv[cut + 1:]
    ap = argparse.ArgumentParser(
        description="Profile two nanogpt builds in alternated pairs of `bench train` runs; "
                    "print each op's median time and how often B beat A.")
    ap.add_argument("--a", required=True, help="the baseline nanogpt binary")
    ap.add_argument("--b", required=True, help="the changed nanogpt binary")
    ap.add_argument("--pairs", type=int, default=6, help="pairs of runs (default 6)")
    ap.add_argument("--top", type=int, default=20, help="ops shown, by A's time (default 20)")
    ap.add_argument("--ops", default="",
                    help="comma-separated op names to show as well, whatever their time")
    ap.add_argument("--env-a", action="append", default=[], metavar="KEY=VALUE",
                    help="environment for A's runs only (repeatable)")
    ap.add_argument("--env-b", action="append", default=[], metavar="KEY=VALUE",
                    help="environment for B's runs only (repeatable)")
    ap.add_argument("--cache-dir",
                    help="NANOGPT_CACHE_DIR for both (default: a fresh one they share, so both "
                         "start from the same autotuner choices)")
    ap.add_argument("--markdown", action="store_true", help="print the op table in Markdown")
    args = ap.parse_args(argv)
    if args.pairs < 1:
        fail(f"--pairs {args.pairs}: give at least 1")
    if args.top < 0:
        fail(f"--top {args.top}: give 0 or more")
    for label, path in (("--a", args.a), ("--b", args.b)):
        if not (os.path.isfile(path) and os.access(path, os.X_OK)):
            fail(f"{label} {path}: not an executable file (give the path of a built nanogpt)")
    env_a, env_b = parse_env(args.env_a, "--env-a"), parse_env(args.env_b, "--env-b")

    with tempfile.TemporaryDirectory(prefix="ab_profile.") as tmp:
        base_env = dict(os.environ)
        base_env["NANOGPT_CACHE_DIR"] = args.cache_dir or os.path.join(tmp, "cache")
        runs = {"A": [], "B": []}
        sides = {"A": (args.a, {**base_env, **env_a}), "B": (args.b, {**base_env, **env_b})}
        # Each binary's autotuner runs and the pages are touched once before the timed pairs.
        for side in ("A", "B"):
            binary, env = sides[side]
            run_once(binary, train_args, env, os.path.join(tmp, f"warm_{side}.json"))
        for i in range(args.pairs):
            order = ("A", "B") if i % 2 == 0 else ("B", "A")
            for side in order:
                binary, env = sides[side]
                r = run_once(binary, train_args, env, os.path.join(tmp, f"{side}{i}.json"))
                runs[side].append(r)
                probe = r.get("kernel_rate_before", {}).get("median_gflops", float("nan"))
                print(f"pair {i + 1} {side}: {r['tokens_per_s']:,.1f} tokens/s, loss "
                      f"{r['loss']!r}, load {r['loadavg_before']:.2f} -> "
                      f"{r['loadavg_after']:.2f}, kernel probe {probe:.1f} GFLOP/s a thread",
                      flush=True)

    a0, b0 = runs["A"][0], runs["B"][0]
    print(f"\nA: {args.a} (revision {a0.get('revision')}){' ' + ' '.join(args.env_a) if args.env_a else ''}")
    print(f"B: {args.b} (revision {b0.get('revision')}){' ' + ' '.join(args.env_b) if args.env_b else ''}")
    print(f"cpu {a0.get('cpu')}, {a0.get('threads')} threads, isa {a0.get('isa')}; "
          f"bench train {' '.join(train_args)}; {args.pairs} pairs, A first in the odd ones")
    losses = {side: sorted({r["loss"] for r in runs[side]}) for side in runs}
    if losses["A"] == losses["B"] and len(losses["A"]) == 1:
        print(f"loss: {losses['A'][0]!r} in every run (the same bits)")
    else:
        print(f"loss: A {losses['A']}, B {losses['B']} (not the same bits)")

    def series(side, key):
        return [r["self_ms"].get(key, 0.0) for r in runs[side]]

    rows = []
    names = sorted(set().union(*(r["self_ms"].keys() for r in runs["A"] + runs["B"])),
                   key=lambda n: -statistics.median(series("A", n)))
    wanted = [n for n in args.ops.split(",") if n]
    for n in wanted:
        if n not in names:
            fail(f"--ops {n}: no such profile scope (some are {', '.join(names[:5])})")
    shown = names[:args.top] + [n for n in wanted if n not in names[:args.top]]
    tok_a = [r["tokens_per_s"] for r in runs["A"]]
    tok_b = [r["tokens_per_s"] for r in runs["B"]]
    rows.append(("tokens/s", statistics.median(tok_a), statistics.median(tok_b),
                 sum(b > a for a, b in zip(tok_a, tok_b))))
    for n in shown:
        xa, xb = series("A", n), series("B", n)
        rows.append((n, statistics.median(xa), statistics.median(xb),
                     sum(b < a for a, b in zip(xa, xb))))

    header = ("op (self ms per run)", "A", "B", "B/A", "B better in")
    table = [(name, fmt(ma), fmt(mb), f"{mb / ma:.3f}" if ma else "-",
              f"{wins}/{args.pairs}") for name, ma, mb, wins in rows]
    if args.markdown:
        print("| " + " | ".join(header) + " |")
        print("|" + "---|" * len(header))
        for row in table:
            print("| " + " | ".join(f"`{row[0]}`" if i == 0 and row[0] != "tokens/s" else c
                                    for i, c in enumerate(row)) + " |")
    else:
        widths = [max(len(str(r[i])) for r in [header] + table) for i in range(len(header))]
        for row in [header] + table:
            print("  ".join(str(c).ljust(widths[i]) if i == 0 else str(c).rjust(widths[i])
                            for i, c in enumerate(row)))


if __name__ == "__main__":
    main()
