#!/usr/bin/python3
"""An independent PyTorch reference for the post-training losses of src/posttrain/.

Usage: /usr/bin/python3 tools/golden/posttrain_losses_reference.py INPUTS.json OUTPUTS.json

Reads cases (the format make_posttrain_losses_golden.py writes: sections "dpo", "group", "ema",
"gae", "policy", "value", each a list of cases) and writes the same cases, each with an
"expected" object: losses, metrics and the gradients torch's autograd gives.

Written the way the Python post-training libraries compute these (TRL's DPOTrainer,
GRPOTrainer and PPOTrainer), not from the C++: sequences become padded [S, T_max] tensors with a
0/1 mask, losses are masked means over tensors, gradients come from loss.backward(), GAE is a
matrix of powers of γλ rather than a recursion. Everything in float64.
"""
import json
import sys

import torch
import torch.nn.functional as F

DTYPE = torch.float64


def tensor(values):
    return torch.tensor(values, dtype=DTYPE)


def padded(flat, offsets, fill=0.0):
    """Flat per-token values → [S, T_max] rows, padding with `fill`."""
    lengths = [offsets[i + 1] - offsets[i] for i in range(len(offsets) - 1)]
    width = max(lengths, default=0)
    rows = [list(flat[offsets[i]:offsets[i + 1]]) + [fill] * (width - lengths[i])
            for i in range(len(lengths))]
    return tensor(rows).reshape(len(lengths), width)


def unpadded(rows, offsets):
    """[S, T_max] → the flat per-token list (dropping the padding)."""
    out = []
    for i in range(len(offsets) - 1):
        out.extend(rows[i, :offsets[i + 1] - offsets[i]].tolist())
    return out


# DPO ----------------------------------------------------------------------------------------

def dpo(case):
    beta = case["beta"]
    policy_chosen = tensor(case["policy_chosen"]).requires_grad_()
    policy_rejected = tensor(case["policy_rejected"]).requires_grad_()
    reference_chosen = tensor(case["reference_chosen"])
    reference_rejected = tensor(case["reference_rejected"])
    # TRL's dpo_loss: logits = pi_logratios - ref_logratios.
    pi_logratios = policy_chosen - policy_rejected
    ref_logratios = reference_chosen - reference_rejected
    logits = pi_logratios - ref_logratios
    kind = case["kind"]
    if kind == "sigmoid":
        losses = -F.logsigmoid(beta * logits)
    elif kind == "ipo":
        losses = (logits - 1 / (2 * beta)) ** 2
    elif kind == "hinge":
        losses = torch.relu(1 - beta * logits)
    else:
        raise ValueError(kind)
    loss = losses.sum() / case["batch_pairs"]
    loss.backward()
    chosen_rewards = beta * (policy_chosen - reference_chosen).detach()
    rejected_rewards = beta * (policy_rejected - reference_rejected).detach()
    return {
        "loss": loss.item(),
        "grad_policy_chosen": policy_chosen.grad.tolist(),
        "grad_policy_rejected": policy_rejected.grad.tolist(),
        "reward_chosen": chosen_rewards.mean().item(),
        "reward_rejected": rejected_rewards.mean().item(),
        "reward_margin": (chosen_rewards - rejected_rewards).mean().item(),
        "reward_accuracy": (chosen_rewards > rejected_rewards).to(DTYPE).mean().item(),
    }


# Advantages ---------------------------------------------------------------------------------

def group(case):
    rewards = tensor(case["rewards"]).view(-1, case["group_size"])
    mean = rewards.mean(dim=1, keepdim=True)
    centred = rewards - mean
    if case["estimator"] == "grpo":
        std = rewards.std(dim=1, keepdim=True)  # torch's default: unbiased, as TRL
        advantages = centred / (std + case["std_eps"])
    else:
        advantages = centred
    uniform = rewards.max(dim=1, keepdim=True).values == rewards.min(dim=1, keepdim=True).values
    advantages = torch.where(uniform, torch.zeros_like(advantages), advantages)
    return {"advantages": advantages.flatten().tolist(), "uniform_groups": int(uniform.sum())}


def ema(case):
    baseline = case["initial_value"]
    decay = case["decay"]
    advantages, baselines = [], []
    for batch in case["batches"]:
        rewards = tensor(batch)
        advantages.append((rewards - baseline).tolist())
        baseline = decay * baseline + (1 - decay) * rewards.mean().item()
        baselines.append(baseline)
    return {"advantages": advantages, "baselines": baselines}


def gae(case):
    gamma, lam = case["gamma"], case["lambda"]
    offsets, mask = case["offsets"], case["mask"]
    n = len(mask)
    advantages, returns = [0.0] * n, [0.0] * n
    for s in range(len(offsets) - 1):
        index = [t for t in range(offsets[s], offsets[s + 1]) if mask[t]]
        if not index:
            continue
        r = tensor([case["rewards"][t] for t in index])
        v = tensor([case["values"][t] for t in index])
        next_v = torch.cat([v[1:], torch.zeros(1, dtype=DTYPE)])
        delta = r + gamma * next_v - v
        # A_t = Σ_{k>=t} (γλ)^(k−t) δ_k as an upper-triangular matrix product.
        k = torch.arange(len(index))
        power = (k[None, :] - k[:, None]).to(DTYPE)
        weights = torch.where(power >= 0, (gamma * lam) ** power.clamp(min=0),
                              torch.zeros_like(power))
        a = weights @ delta
        for j, t in enumerate(index):
            advantages[t] = a[j].item()
            returns[t] = (a[j] + v[j]).item()
    return {"advantages": advantages, "returns": returns}


# Policy and value losses --------------------------------------------------------------------

def aggregate(per_token, mask, aggregation, max_length, normalizers):
    """TRL's masked reductions, divided by the whole batch's counts."""
    masked = per_token * mask
    if aggregation == "sequence_mean":
        per_sequence = masked.sum(dim=1) / mask.sum(dim=1).clamp(min=1.0)
        return per_sequence.sum() / normalizers["sequences"]
    if aggregation == "token_mean":
        return masked.sum() / max(normalizers["tokens"], 1)
    if aggregation == "constant":
        return masked.sum() / (normalizers["sequences"] * max_length)
    raise ValueError(aggregation)


def policy(case):
    config = case["config"]
    offsets = case["offsets"]
    mask = padded(case["mask"], offsets)
    logp = padded(case["logp"], offsets).requires_grad_()
    advantages = padded(case["advantages"], offsets)
    counted = mask.sum()
    out = {"tokens": int(counted)}
    if case["logp_old"]:
        logp_old = padded(case["logp_old"], offsets)
        ratio = torch.exp(logp - logp_old)
        out["mean_ratio"] = ((ratio * mask).sum() / counted).item()
    else:
        out["mean_ratio"] = 1.0
    if config["objective"] == "clipped":
        low, high = 1 - config["clip_low"], 1 + config["clip_high"]
        unclipped = ratio * advantages
        clipped = torch.clamp(ratio, low, high) * advantages
        per_token = -torch.min(unclipped, clipped)
        is_clipped = ((ratio < low) & (advantages < 0)) | ((ratio > high) & (advantages > 0))
        out["clip_fraction"] = ((is_clipped.to(DTYPE) * mask).sum() / counted).item()
    else:
        per_token = -advantages * logp
        out["clip_fraction"] = 0.0
    if case["logp_ref"]:
        logp_ref = padded(case["logp_ref"], offsets)
        kl = torch.exp(logp_ref - logp) - (logp_ref - logp) - 1
        out["mean_kl"] = ((kl * mask).sum() / counted).item()
        if config["kl_coef"] > 0:
            per_token = per_token + config["kl_coef"] * kl
    else:
        out["mean_kl"] = 0.0
    loss = aggregate(per_token, mask, config["aggregation"], config["max_length"],
                     case["normalizers"])
    loss.backward()
    out["loss"] = loss.item()
    out["grad_logp"] = unpadded(logp.grad, offsets)
    return out


def value(case):
    config = case["config"]
    offsets = case["offsets"]
    mask = padded(case["mask"], offsets)
    values = padded(case["values"], offsets).requires_grad_()
    returns = padded(case["returns"], offsets)
    losses = (values - returns) ** 2
    out = {"tokens": int(mask.sum()), "clip_fraction": 0.0}
    eps = config["value_clip"]
    if eps > 0:
        old_values = padded(case["old_values"], offsets)
        clipped_values = old_values + torch.clamp(values - old_values, -eps, eps)
        clipped_losses = (clipped_values - returns) ** 2
        out["clip_fraction"] = (((clipped_losses > losses).to(DTYPE) * mask).sum() /
                                mask.sum()).item()
        losses = torch.max(losses, clipped_losses)
    loss = aggregate(0.5 * losses, mask, config["aggregation"], config["max_length"],
                     case["normalizers"])
    loss.backward()
    out["loss"] = loss.item()
    out["grad_values"] = unpadded(values.grad, offsets)
    return out


SECTIONS = {"dpo": dpo, "group": group, "ema": ema, "gae": gae, "policy": policy, "value": value}


def compute(inputs):
    """The cases of `inputs`, each with its "expected" results."""
    outputs = {}
    for section, cases in inputs.items():
        outputs[section] = [dict(case, expected=SECTIONS[section](case)) for case in cases]
    return outputs


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    with open(sys.argv[1]) as f:
        inputs = json.load(f)
    with open(sys.argv[2], "w") as f:
        json.dump(compute(inputs), f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
