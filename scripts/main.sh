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
mkdir -p "$OUT"
# Every fortune file; *.dat are indexes and *.u8 are symlinks to the same text.
mapfile -t INPUTS < <(find /usr/share/games/fortunes -maxdepth 1 -type f ! -name '*.dat' | sort)

if [ -f "$OUT/tokenizer.json" ]; then
  echo "tokenizer: $OUT/tokenizer.json exists, skipping"
else
  "$NANOGPT" tokenizer train --input "${INPUTS[@]}" --doc-separator % --vocab-size 8192 \
    --output "$OUT/tokenizer.json"
fi

if [ -f "$OUT/shards/meta.json" ]; then
  echo "shards: $OUT/shards/meta.json exists, skipping"
else
  "$NANOGPT" tokenize --tokenizer "$OUT/tokenizer.json" --input "${INPUTS[@]}" --doc-separator % \
    --val-fraction 0.05 --output-dir "$OUT/shards"
fi

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
