#!/usr/bin/python3
"""Rollout throughput: `nanogpt bench rollout` (RL's sampling step) against a PyTorch peer sampling
the same model with a K/V cache from the same prompt ids, batched and one sequence at a time
(issue 18, item 7 and "Results"; target: ours >= 3x PyTorch batched).

Usage (Debian's python3-torch; run with /usr/bin/python3):
  bench/rollout_vs_pytorch.py --checkpoint RUN_OR_CHECKPOINT [--nanogpt build/nanogpt]
                              [--tasks addition:1-2] [--prompts 8] [--group 8] [--max-tokens 32]
                              [--temperature 1.0] [--repeats 3] [--seed 0] [--threads 2]
                              [--mode fp32|bf16|both] [--no-batch-one] [--no-agreement]
                              [--omp-wait-policy auto|active|passive|default]

The work: the P prompts `nanogpt rl` draws at its first step (the task mixture's train problems in
the chat format, ending with <|assistant_start|>), G completions of each, every completion sampled
at --temperature until <|assistant_end|>, <|endoftext|> or --max-tokens. Ours prints the prompt ids
(--dump-prompts) and the peer samples from exactly those. Tokens/s counts the tokens each side
sampled (the end token and a drawn <|endoftext|> included) over the time of the sampling alone
(model loading and prompt rendering excluded, on both sides); each side counts its own, since the
two random streams sample different completions (their mean lengths are printed: a random
model's completions run to max_tokens, a trained one's stop early).

Ours: `nanogpt bench rollout` as is (the checkpoint's precision), batched (one prefill per
prompt, its K/V cache copied to each sample, all samples decoded as one batch, finished ones
leaving it) and --batch-one (each sample alone, its own prefill). The peer, as a competent PyTorch
1.13 user would write it: the model of bench/evals_vs_pytorch.py (weights from model.safetensors in
plain tensors, fused qkv, explicit masked attention, K/V cache), torch.inference_mode, the better
of fp32 and bf16 autocast. Batched: all P prompts left-padded into one prefill (positions and
mask per row, as Hugging Face's generate does with an attention mask), each prompt's cache
repeated for its G samples, then all P*G rows decoded together, finished rows dropped from the
batch and the cache; sampling by torch.multinomial from a seeded generator (argmax at temperature
0). Batch 1: each sample alone, its own prefill and cache.

Agreement: greedy (temperature 0, one sample per prompt), both sides in fp32: the fraction of
prompts whose completions match token for token, and of completion tokens before the first
difference; then bf16 against bf16, which may differ (rounding flips near-ties).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import evals_vs_pytorch as peer  # noqa: E402  (the PyTorch model of ours, with a K/V cache)
from pytorch_train_step import choose_omp_wait_policy, use_openblas_widest_core  # noqa: E402

torch = None  # imported in main(), after OMP_WAIT_POLICY is chosen


def load_average() -> float:
    return round(os.getloadavg()[0], 2)


def run_ours(args, extra: list[str]) -> dict:
    cmd = [args.nanogpt, "bench", "rollout", "--checkpoint", args.checkpoint, "--tasks", args.tasks,
           "--prompts", str(args.prompts), "--group", str(args.group),
           "--max-tokens", str(args.max_tokens), "--seed", str(args.seed)] + extra
    if args.tokenizer:
        cmd += ["--tokenizer", args.tokenizer]
    env = dict(os.environ, NANOGPT_THREADS=str(args.threads))
    r = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if r.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed:\n{r.stderr}")
    return json.loads(r.stdout)


def draw(z, temperature: float, gen):
    """The next token of each row of capped logits z [B, V]."""
    if temperature > 0:
        return torch.multinomial((z / temperature).softmax(-1), 1, generator=gen)[:, 0]
    return z.argmax(-1)


def sample_batched(model, prompts, group, max_tokens, temperature, eot, end, gen):
    """group completions of every prompt, all rows decoded as one batch; finished rows leave it.
    Returns per prompt, per sample, the sampled tokens (a final end or EOT included)."""
    V = model.cfg["vocab_size"]
    rows = [[eot] + p for p in prompts]
    width = max(len(r) for r in rows)
    pad = torch.tensor([width - len(r) for r in rows])
    batch = torch.full((len(rows), width), eot, dtype=torch.long)
    for b, r in enumerate(rows):
        batch[b, width - len(r):] = torch.tensor(r)
    logits, past = model.forward(batch, last_only=True, pad=pad)
    # Each prompt's cache and last logits repeated for its samples.
    expand = torch.arange(len(prompts)).repeat_interleave(group)
    past = [None if kv is None else (kv[0][expand], kv[1][expand]) for kv in past]
    z, pad = logits[expand, -1, :V], pad[expand]
    live = list(range(len(expand)))  # the completion each batch row samples
    out = [[] for _ in live]
    for _ in range(max_tokens):
        nxt = draw(z, temperature, gen)
        keep = []
        for b, t in enumerate(nxt.tolist()):
            out[live[b]].append(t)
            if t != eot and t != end and len(out[live[b]]) < max_tokens:
                keep.append(b)
        if not keep:
            break
        if len(keep) < len(live):
            k = torch.tensor(keep)
            past = [None if kv is None else (kv[0][k], kv[1][k]) for kv in past]
            nxt, pad, live = nxt[k], pad[k], [live[b] for b in keep]
        logits, past = model.forward(nxt[:, None], past, last_only=True, pad=pad)
        z = logits[:, -1, :V]
    return [out[i * group:(i + 1) * group] for i in range(len(prompts))]


def sample_one_at_a_time(model, prompts, group, max_tokens, temperature, eot, end, gen):
    """The same completions' work one sequence at a time: each its own prefill and cache."""
    V = model.cfg["vocab_size"]
    result = []
    for p in prompts:
        samples = []
        for _ in range(group):
            logits, past = model.forward(torch.tensor([[eot] + p]), last_only=True)
            tokens = []
            while True:
                t = int(draw(logits[:, -1, :V], temperature, gen)[0])
                tokens.append(t)
                if t == eot or t == end or len(tokens) == max_tokens:
                    break
                logits, past = model.forward(torch.tensor([[t]]), past, last_only=True)
            samples.append(tokens)
        result.append(samples)
    return result


def time_peer(sample, model, prompts, args, mode, eot, end) -> dict:
    """Best and median tokens/s of `sample` over the repeats (after one untimed run), each repeat
    from the same seed as ours repeats the same work."""
    ctx = (torch.autocast("cpu", dtype=torch.bfloat16) if mode == "bf16"
           else torch.autocast("cpu", enabled=False))
    seconds = []
    with torch.inference_mode(), ctx:
        for r in range(args.repeats + 1):
            gen = torch.Generator().manual_seed(args.seed)
            t0 = time.perf_counter()
            out = sample(model, prompts, args.group, args.max_tokens, args.temperature, eot, end, gen)
            if r > 0:
                seconds.append(time.perf_counter() - t0)
    tokens = sum(len(s) for group in out for s in group)
    return {"mode": mode, "tokens": tokens, "seconds": seconds,
            "mean_completion_tokens": tokens / (len(prompts) * args.group),
            "tokens_per_s_best": tokens / min(seconds),
            "tokens_per_s_median": tokens / statistics.median(seconds)}


def agreement(ours: list, theirs: list) -> dict:
    """Greedy completions of each prompt (the first sample), token for token."""
    same = prefix = total = 0
    for o, t in zip(ours, theirs):
        o, t = o[0], t[0]
        same += int(o == t)
        n = next((i for i, (a, b) in enumerate(zip(o, t)) if a != b), min(len(o), len(t)))
        prefix += n
        total += max(len(o), len(t))
    return {"same_completions": f"{same}/{len(ours)}", "same_fraction": same / len(ours),
            "matching_prefix_fraction": prefix / max(total, 1)}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--checkpoint", required=True)
    ap.add_argument("--nanogpt", default="build/nanogpt")
    ap.add_argument("--tokenizer", help="default: the one the checkpoint records")
    ap.add_argument("--tasks", default="addition:1-2")
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--group", type=int, default=8)
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--temperature", type=float, default=1.0)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--mode", choices=["fp32", "bf16", "both"], default="both",
                    help="the peer's precision; both runs both and reports the faster")
    ap.add_argument("--no-batch-one", action="store_true",
                    help="skip the batch-1 figures (the slow half)")
    ap.add_argument("--no-agreement", action="store_true", help="skip the greedy agreement check")
    ap.add_argument("--omp-wait-policy", default="auto",
                    choices=["auto", "active", "passive", "default"],
                    help="PyTorch's OpenMP threads: auto is passive when other processes keep "
                         "the cores busy (as bench/pytorch_train_step.py; OMP_WAIT_POLICY wins)")
    args = ap.parse_args()
    policy = choose_omp_wait_policy(args.omp_wait_policy)
    if policy == "default":
        os.environ.pop("OMP_WAIT_POLICY", None)
    else:
        os.environ["OMP_WAIT_POLICY"] = policy
    openblas_core = use_openblas_widest_core()
    global torch
    import torch as torch_module
    import torch.nn.functional as functional
    torch = peer.torch = torch_module
    peer.F = functional
    torch.set_num_threads(args.threads)
    ckpt = peer.resolve_checkpoint(args.checkpoint)
    cfg = json.loads(peer.load_file(os.path.join(ckpt, "model.safetensors"))[1]["config"])
    # The window training ended with (`bench rollout`'s default): the whole max_window_tokens.
    model = peer.Model(ckpt, max(1, cfg["max_window_tokens"] // cfg["block_size"]))

    with tempfile.TemporaryDirectory() as tmp:
        prompts_file = os.path.join(tmp, "prompts.json")
        loads = {"ours_batched": [load_average()]}
        ours = {"batched": run_ours(args, ["--temperature", str(args.temperature),
                                           "--repeats", str(args.repeats),
                                           "--dump-prompts", prompts_file])}
        loads["ours_batched"].append(load_average())
        dumped = json.load(open(prompts_file))
        if not args.no_batch_one:
            loads["ours_batch_one"] = [load_average()]
            ours["batch_one"] = run_ours(args, ["--temperature", str(args.temperature),
                                                "--repeats", str(args.repeats), "--batch-one"])
            loads["ours_batch_one"].append(load_average())
        prompts, eot, end = dumped["prompts"], dumped["eot_id"], dumped["assistant_end"]
        modes = ["fp32", "bf16"] if args.mode == "both" else [args.mode]
        theirs = {}
        kinds = [("batched", sample_batched)]
        if not args.no_batch_one:
            kinds.append(("batch_one", sample_one_at_a_time))
        for kind, sample in kinds:
            loads["pytorch_" + kind] = [load_average()]
            for mode in modes:
                r = time_peer(sample, model, prompts, args, mode, eot, end)
                if kind not in theirs or r["tokens_per_s_best"] > theirs[kind]["tokens_per_s_best"]:
                    theirs[kind] = r
            loads["pytorch_" + kind].append(load_average())

        checks = {}
        if not args.no_agreement:
            greedy = argparse.Namespace(**dict(vars(args), group=1, temperature=0.0))
            for mode in modes:
                completions_file = os.path.join(tmp, f"greedy_{mode}.json")
                run_ours(greedy, ["--temperature", "0", "--repeats", "1", "--warmup", "0",
                                  "--precision", mode, "--dump-completions", completions_file])
                ours_greedy = json.load(open(completions_file))["completions"]
                ctx = (torch.autocast("cpu", dtype=torch.bfloat16) if mode == "bf16"
                       else torch.autocast("cpu", enabled=False))
                with torch.inference_mode(), ctx:
                    batched = sample_batched(model, prompts, 1, args.max_tokens, 0.0, eot, end, None)
                    one = sample_one_at_a_time(model, prompts, 1, args.max_tokens, 0.0, eot, end, None)
                checks[mode] = {"batched": agreement(ours_greedy, batched),
                                "batch_one": agreement(ours_greedy, one)}

    def rate(r):
        return r["tokens_per_s_best"] if r else None

    def ratio(a, b):
        return round(a / b, 2) if a and b else None

    ob, o1 = ours["batched"], ours.get("batch_one")
    tb, t1 = theirs["batched"], theirs.get("batch_one")
    rows = [("ours batched", rate(ob), ob["precision"], ob["mean_completion_tokens"]),
            ("ours batch-1", rate(o1), o1 and o1["precision"], o1 and o1["mean_completion_tokens"]),
            ("PyTorch batched", rate(tb), tb["mode"], tb["mean_completion_tokens"]),
            ("PyTorch batch-1", rate(t1), t1 and t1["mode"], t1 and t1["mean_completion_tokens"])]
    print(f"rollouts: {args.prompts} prompts x {args.group} samples of {ob['tasks']}, "
          f"max_tokens {args.max_tokens}, temperature {args.temperature}, "
          f"{args.threads} threads, {ob['cpu']}")
    print(f"{'':18}{'tokens/s':>10}  {'precision':>9}  {'mean length':>11}")
    for name, r, precision, length in rows:
        if r is not None:
            print(f"{name:18}{r:10.1f}  {precision:>9}  {length:11.1f}")
    line = f"ours / PyTorch: batched {ratio(rate(ob), rate(tb))}x (target >= 3x)"
    if o1 and t1:
        line += f", batch-1 {ratio(rate(o1), rate(t1))}x"
    print(line)
    for side, (before, after) in loads.items():
        print(f"load average {side}: {before} -> {after}")
    for mode, c in checks.items():
        print(f"greedy agreement {mode}: batched {c['batched']['same_completions']} same "
              f"({c['batched']['matching_prefix_fraction']:.3f} of tokens before a difference), "
              f"batch-1 {c['batch_one']['same_completions']} same")
    print(json.dumps({
        "bench": "rollout_vs_pytorch", "tasks": ob["tasks"], "prompts": args.prompts,
        "group": args.group, "max_tokens": args.max_tokens, "temperature": args.temperature,
        "threads": args.threads, "cpu": ob["cpu"], "revision": ob["revision"],
        "omp_wait_policy": policy, "openblas_core": openblas_core,
        "ours_batched": ob, "ours_batch_one": o1, "pytorch_batched": tb, "pytorch_batch_one": t1,
        "ratio_batched": ratio(rate(ob), rate(tb)), "ratio_batch_one": ratio(rate(o1), rate(t1)),
        "load_average": loads, "greedy_agreement": checks}))


if __name__ == "__main__":
    main()
