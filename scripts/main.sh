#!/usr/bin/env bash
# The main job: set up, build, and prepare the default corpus (Debian's fortunes, one fortune
# per document) into a BPE tokenizer and token shards under data/fortunes/. Re-running skips
# finished steps.
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

echo
echo "prepared corpus:"
ls -l "$OUT/tokenizer.json" "$OUT"/shards/*.bin
grep -A3 '"tokens"' "$OUT/shards/meta.json"
echo "sample: $(echo 'The quick brown fox jumps over the lazy dog.' | "$NANOGPT" encode --tokenizer "$OUT/tokenizer.json")"
