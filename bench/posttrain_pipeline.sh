#!/usr/bin/env bash
# The post-training results of issue 18, end to end: a `cpu` base model pre-trained on fortunes
# with the chat tokens, then for each seed SFT on a task mixture, DPO on on-policy pairs and RL
# (GRPO), both from the SFT checkpoint, each evaluated on the same held-out problems; then one
# rubric-reward RL run; then the table (bench/posttrain_results.py). Parts that exist are kept.
#
#   bash bench/posttrain_pipeline.sh OUT_DIR [SEEDS]     (SEEDS default "0 1 2")
set -euo pipefail
OUT=${1:?usage: posttrain_pipeline.sh OUT_DIR [SEEDS]}
SEEDS=${2:-0 1 2}
NANOGPT=${NANOGPT:-build/nanogpt}
mkdir -p "$OUT"
SFT_TASKS=addition:1-2,reverse:1,sort:1,letter_count:1
RL_TASKS=sort:1,reverse:1,letter_count:1   # where SFT leaves some problems unsolved

[ -d "$OUT/data" ] || "$NANOGPT" prepare fortunes --out "$OUT/data"
[ -d "$OUT/base/checkpoints" ] || "$NANOGPT" train --config cpu --train "$OUT/data/shards/train_*.bin" \
  --val "$OUT/data/shards/val_*.bin" --out "$OUT/base"
for s in $SEEDS; do
  [ -d "$OUT/sft-s$s/checkpoints" ] || "$NANOGPT" sft --checkpoint "$OUT/base" --tasks "$SFT_TASKS" \
    --examples 1000 --epochs 2 --rows-per-step 4 --seed "$s" --eval-problems 50 --eval-max-tokens 16 \
    --out "$OUT/sft-s$s"
  [ -d "$OUT/dpo-s$s/checkpoints" ] || "$NANOGPT" dpo --checkpoint "$OUT/sft-s$s" --tasks "$RL_TASKS" \
    --pair-problems 256 --pair-group 8 --pair-max-tokens 16 --epochs 4 --pairs-per-step 16 --lr-scale 0.1 \
    --seed "$s" \
    --eval-tasks "$RL_TASKS" --eval-problems 50 --out "$OUT/dpo-s$s"
  [ -d "$OUT/rl-s$s/checkpoints" ] || "$NANOGPT" rl --checkpoint "$OUT/sft-s$s" --tasks "$RL_TASKS" \
    --steps 60 --prompts 8 --group 8 --max-tokens 16 --temperature 1.0 --lr-scale 0.05 --eval-every 20 \
    --eval-problems 50 --seed "$s" --out "$OUT/rl-s$s"
done
first=${SEEDS%% *}
[ -d "$OUT/rubric-s$first/checkpoints" ] || "$NANOGPT" rl --checkpoint "$OUT/sft-s$first" \
  --rubric builtin:fortune-answers --steps 40 --prompts 12 --group 8 --max-tokens 48 --temperature 1.0 \
  --lr-scale 0.05 --eval-every 20 --eval-samples 8 --seed "$first" --out "$OUT/rubric-s$first"
/usr/bin/python3 bench/posttrain_results.py --root "$OUT" --seeds "$(echo $SEEDS | tr ' ' ,)"
