#!/usr/bin/env bash
# The main job: set up, build, prepare the default corpus (Debian's fortunes, one fortune per
# document) into a BPE tokenizer and token shards under data/fortunes/, train the `cpu` preset
# on it, print the final validation loss and a sample. Re-running skips finished steps (a
# finished training run is not repeated; an interrupted one resumes).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh build

NANOGPT=build/nanogpt
OUT=data/fortunes
# Every fortune file (not the *.dat indexes or the *.u8 links) into an 8192-token BPE and
# shards with 5% of the fortunes held out; parts that exist are kept.
"$NANOGPT" prepare fortunes --out "$OUT"

RUN=$OUT/run
# A run with checkpoints resumes (a finished one returns at once).
resume=()
[ -d "$RUN/checkpoints" ] && resume=(--resume)
"$NANOGPT" train --config cpu --train "$OUT/shards/train_*.bin" --val "$OUT/shards/val_*.bin" \
  --out "$RUN" "${resume[@]}"

echo
echo "final validation loss:"
"$NANOGPT" eval --checkpoint "$RUN" --val "$OUT/shards/val_*.bin"
echo
echo "sample:"
"$NANOGPT" sample --checkpoint "$RUN" --prompt "The meaning of life is" --max-tokens 120 \
  --temperature 0.8 --top-k 50 --seed 1
