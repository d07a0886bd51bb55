#!/usr/bin/python3
"""Writes tests/data/posttrain_losses_golden.json: random inputs for the post-training losses and
what the independent PyTorch reference (posttrain_losses_reference.py) computes from them.

Usage: /usr/bin/python3 tools/golden/make_posttrain_losses_golden.py [output path]

Deterministic (numpy's seeded generator, float64 throughout; json writes every double so it
reads back exactly). The inputs avoid the points where a loss has a kink (a ratio at 1 ± ε, a
hinge margin at 1/β, a clipped value at V_old ± ε_v), where two correct implementations may
pick different one-sided gradients. Cases whose normalizers exceed their own counts stand for
one part of a larger batch (micro-batching).
"""
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from posttrain_losses_reference import compute  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEFAULT_OUT = os.path.join(REPO, "tests", "data", "posttrain_losses_golden.json")
SEED = 20261126
KINK_DISTANCE = 1e-3

rng = np.random.default_rng(SEED)


def floats(a):
    return [float(x) for x in a]


def away_from_zero(n, scale=1.0):
    """Normal draws, none within 0.05·scale of 0."""
    x = rng.normal(0.0, scale, n)
    return np.where(np.abs(x) < 0.05 * scale, np.sign(x + 1e-300) * 0.05 * scale + x, x)


def dpo_cases():
    cases = []
    for kind in ("sigmoid", "ipo", "hinge"):
        for beta, pairs, batch_pairs in ((0.1, 8, 8), (0.5, 7, 11)):
            while True:
                pc = -rng.uniform(5, 60, pairs)
                pr = -rng.uniform(5, 60, pairs)
                rc = pc - rng.normal(0, 3, pairs)
                rr = pr - rng.normal(0, 3, pairs)
                h = (pc - rc) - (pr - rr)
                if np.all(np.abs(beta * h - 1) > KINK_DISTANCE):
                    break
            cases.append({"name": f"{kind}_beta{beta}", "kind": kind, "beta": beta,
                          "batch_pairs": batch_pairs, "policy_chosen": floats(pc),
                          "policy_rejected": floats(pr), "reference_chosen": floats(rc),
                          "reference_rejected": floats(rr)})
    return cases


def group_cases():
    g = 4
    binary = rng.integers(0, 2, 6 * g).astype(float)
    binary[0:g] = 1.0  # one group all right
    binary[g:2 * g] = 0.0  # one all wrong
    continuous = rng.normal(0, 1, 5 * 3)
    continuous[6:9] = 0.1  # uniform, and (0.1 + 0.1 + 0.1)/3 is not the double 0.1
    cases = []
    for estimator in ("reinforce_group_mean", "grpo"):
        for name, rewards, size in (("binary", binary, g), ("continuous", continuous, 3),
                                    ("pairs", rng.normal(0, 1, 8), 2)):
            cases.append({"name": f"{estimator}_{name}", "estimator": estimator,
                          "group_size": size, "std_eps": 1e-4, "rewards": floats(rewards)})
    return cases


def ema_cases():
    return [{"name": "three_batches", "decay": 0.9, "initial_value": 0.2,
             "batches": [floats(rng.normal(0.5, 1, 5)), floats(rng.normal(0.5, 1, 3)),
                         floats(rng.normal(0.5, 1, 4))]},
            {"name": "decay0", "decay": 0.0, "initial_value": 0.0,
             "batches": [floats(rng.normal(0, 1, 4)), floats(rng.normal(0, 1, 4))]}]


def layout(sequences, min_len=3, max_len=9):
    """Random sequences: a masked prompt of 1-3 tokens, counted completion tokens, sometimes
    masked padding after them."""
    offsets, mask = [0], []
    for _ in range(sequences):
        prompt = int(rng.integers(1, 4))
        completion = int(rng.integers(min_len, max_len + 1))
        padding = int(rng.integers(0, 3))
        mask += [0] * prompt + [1] * completion + [0] * padding
        offsets.append(len(mask))
    return offsets, mask


def gae_cases():
    cases = []
    for gamma, lam in ((1.0, 0.95), (0.9, 0.8), (1.0, 1.0), (0.99, 0.0)):
        offsets, mask = layout(4)
        n = len(mask)
        rewards = rng.normal(0, 0.05, n)  # a per-token penalty, as PPO's KL reward
        for s in range(len(offsets) - 1):
            last = max(t for t in range(offsets[s], offsets[s + 1]) if mask[t])
            rewards[last] += rng.normal(1, 1)
        cases.append({"name": f"gamma{gamma}_lambda{lam}", "gamma": gamma, "lambda": lam,
                      "offsets": offsets, "mask": mask, "rewards": floats(rewards),
                      "values": floats(rng.normal(0.3, 0.5, n))})
    return cases


def policy_inputs(offsets, mask, config, with_old, with_ref):
    n = len(mask)
    while True:
        logp_old = -rng.uniform(0.05, 4, n)
        logp = logp_old + rng.normal(0, 0.3, n)
        ratio = np.exp(logp - logp_old)
        low, high = 1 - config["clip_low"], 1 + config["clip_high"]
        if np.all(np.abs(ratio - low) > KINK_DISTANCE) and np.all(
                np.abs(ratio - high) > KINK_DISTANCE):
            break
    return {"logp": floats(logp), "logp_old": floats(logp_old) if with_old else [],
            "logp_ref": floats(logp_old + rng.normal(0, 0.2, n)) if with_ref else [],
            "advantages": floats(away_from_zero(n))}


def counts(offsets, mask, extra_sequences=0, extra_tokens=0):
    return {"sequences": len(offsets) - 1 + extra_sequences, "tokens": sum(mask) + extra_tokens}


def policy_cases():
    cases = []
    variants = (
        # objective, clip_low, clip_high, kl_coef, with_old, with_ref
        ("clipped", 0.2, 0.2, 0.0, True, False),
        ("clipped", 0.2, 0.28, 0.04, True, True),
        ("clipped", 0.1, 0.3, 0.0, True, True),  # KL measured, not penalised
        ("reinforce", 0.2, 0.2, 0.0, False, False),
        ("reinforce", 0.2, 0.2, 0.05, True, True),
    )
    for objective, clip_low, clip_high, kl_coef, with_old, with_ref in variants:
        for aggregation in ("sequence_mean", "token_mean", "constant"):
            offsets, mask = layout(5)
            config = {"objective": objective, "clip_low": clip_low, "clip_high": clip_high,
                      "kl_coef": kl_coef, "aggregation": aggregation, "max_length": 12}
            case = {"name": f"{objective}_{clip_low}_{clip_high}_kl{kl_coef}_{aggregation}",
                    "config": config, "offsets": offsets, "mask": mask,
                    "normalizers": counts(offsets, mask)}
            case.update(policy_inputs(offsets, mask, config, with_old, with_ref))
            cases.append(case)
    # One part of a larger batch: the whole batch's normalizers.
    offsets, mask = layout(3)
    for aggregation in ("sequence_mean", "token_mean", "constant"):
        config = {"objective": "clipped", "clip_low": 0.2, "clip_high": 0.28, "kl_coef": 0.04,
                  "aggregation": aggregation, "max_length": 10}
        case = {"name": f"part_of_batch_{aggregation}", "config": config, "offsets": offsets,
                "mask": mask, "normalizers": counts(offsets, mask, 4, 23)}
        case.update(policy_inputs(offsets, mask, config, True, True))
        cases.append(case)
    return cases


def value_cases():
    cases = []
    for value_clip in (0.0, 0.2):
        for aggregation in ("sequence_mean", "token_mean", "constant"):
            offsets, mask = layout(4)
            n = len(mask)
            while True:
                old_values = rng.normal(0.3, 0.5, n)
                values = old_values + rng.normal(0, 0.3, n)
                returns = old_values + rng.normal(0, 0.5, n)
                clipped = old_values + np.clip(values - old_values, -value_clip, value_clip)
                gap = (clipped - returns) ** 2 - (values - returns) ** 2
                if value_clip == 0 or (
                        np.all(np.abs(np.abs(values - old_values) - value_clip) > KINK_DISTANCE)
                        and np.all((np.abs(gap) > KINK_DISTANCE) | (gap == 0))):
                    break
            cases.append({"name": f"clip{value_clip}_{aggregation}",
                          "config": {"value_clip": value_clip, "aggregation": aggregation,
                                     "max_length": 12},
                          "offsets": offsets, "mask": mask, "normalizers": counts(offsets, mask),
                          "values": floats(values),
                          "old_values": floats(old_values) if value_clip > 0 else [],
                          "returns": floats(returns)})
    return cases


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else DEFAULT_OUT
    inputs = {"dpo": dpo_cases(), "group": group_cases(), "ema": ema_cases(), "gae": gae_cases(),
              "policy": policy_cases(), "value": value_cases()}
    golden = compute(inputs)
    with open(out, "w") as f:
        json.dump(golden, f, indent=1)
        f.write("\n")
    print(f"wrote {out}: " + ", ".join(f"{len(v)} {k}" for k, v in golden.items()))


if __name__ == "__main__":
    main()
