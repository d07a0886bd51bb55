#!/usr/bin/python3
"""Writes tests/data/golden_eval_scores.json: what the evaluation harness's `choice` and `text`
cases score (issue 17), computed by the independent PyTorch reference (gpt_reference.py) in
float64 on golden_model_small.safetensors' weights (make_model_golden.py).

Usage: /usr/bin/python3 tools/golden/make_eval_golden.py [output directory]

A `choice` case scores each continuation as Σ log p(cont_j | EOT, context, cont_<j); a `text`
case scores Σ log p(token_t | EOT, tokens_<t) — each a plain forward of the whole sequence (no
K/V cache, no shared prefix), so the C++ scorer's cached, batched path is checked against the
definition. Contexts and continuations are random token ids (EOT excluded), of lengths that cover
one-token continuations, one-token contexts and sequences past one 128-token attention block.
"""
import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpt_reference import GPT, GPTConfig  # noqa: E402
from safetensors_io import load_file  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEFAULT_DIR = os.path.join(REPO, "tests", "data")
MODEL_FILE = "golden_model_small.safetensors"
OUT_FILE = "golden_eval_scores.json"
SEED = 20261128
# (context length, continuation lengths) per choice case.
CHOICE_SHAPES = [(1, [1, 3]), (5, [2, 2, 7, 1]), (17, [4, 9, 6]), (150, [3, 12])]
TEXT_LENGTHS = [1, 23, 140]


def load_model(path: str) -> tuple[GPT, GPTConfig]:
    tensors, meta = load_file(path)
    cfg = GPTConfig(**json.loads(meta["config"]))
    model = GPT(cfg)
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.copy_(torch.from_numpy(tensors[f"param/{name}"].copy()))
    return model.double(), cfg


def token_logprobs(model: GPT, seq: list[int]) -> torch.Tensor:
    """log p(seq[t] | seq[<t]) for t >= 1, one plain forward."""
    s = torch.tensor(seq, dtype=torch.int64)
    with torch.no_grad():
        return -model(s[:-1], s[1:], reduction="none")


def random_tokens(gen: torch.Generator, n: int, eot: int) -> list[int]:
    return torch.randint(0, eot, (n,), generator=gen).tolist()


def main():
    out_dir = sys.argv[1] if len(sys.argv) > 1 else DEFAULT_DIR
    torch.set_num_threads(1)
    model, cfg = load_model(os.path.join(DEFAULT_DIR, MODEL_FILE))
    gen = torch.Generator().manual_seed(SEED)
    eot = cfg.eot_id
    choices = []
    for context_len, cont_lens in CHOICE_SHAPES:
        context = random_tokens(gen, context_len, eot)
        conts = [random_tokens(gen, n, eot) for n in cont_lens]
        scores = []
        for cont in conts:
            lp = token_logprobs(model, [eot] + context + cont)
            scores.append(float(lp[context_len:].sum()))  # the rows that predict cont
        choices.append({"context": context, "continuations": conts, "logprobs": scores})
    texts = []
    for n in TEXT_LENGTHS:
        tokens = random_tokens(gen, n, eot)
        logprob = float(token_logprobs(model, [eot] + tokens).sum())
        texts.append({"tokens": tokens, "logprob": logprob})
    doc = {"generator": f"tools/golden/make_eval_golden.py torch {torch.__version__}",
           "model": MODEL_FILE, "window_blocks": cfg.window_blocks, "choice": choices,
           "text": texts}
    path = os.path.join(out_dir, OUT_FILE)
    with open(path + ".tmp", "w", encoding="utf-8") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
    os.replace(path + ".tmp", path)
    print(f"wrote {path}: {len(choices)} choice cases, {len(texts)} texts")


if __name__ == "__main__":
    main()
