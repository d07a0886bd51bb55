#!/usr/bin/env bash
# The layering rule of docs/ARCHITECTURE.md: a file under src/LAYER/ includes only headers of its
# own layer or lower ones, in the order runtime < kernels < config < model < optim < train < cli,
# and data/ needs only runtime/ (cli, the top, may include data/ too; train reads batches).
# eval/ (leaderboards, evaluations) sits between train and cli: it may include runtime, config,
# model and data headers, and only cli includes it. posttrain/ (supervised fine-tuning, DPO, RL)
# sits above eval and train: it may include every layer but cli, and only cli includes it.
# Prints every offending #include line and exits 1 if there is one.
set -euo pipefail
cd "$(dirname "$0")/../src"

rank() {
  case "$1" in
    runtime) echo 0 ;; kernels) echo 1 ;; config) echo 2 ;; model) echo 3 ;;
    optim) echo 4 ;; train) echo 5 ;; cli) echo 6 ;; *) echo -1 ;;
  esac
}

# Whether a file of layer $1 may include a header of layer $2.
allowed() {
  local from=$1 to=$2
  [ "$from" = "$to" ] && return 0
  [ "$to" = runtime ] && return 0
  if [ "$from" = posttrain ]; then [ "$to" != cli ]; return; fi
  if [ "$to" = posttrain ]; then [ "$from" = cli ]; return; fi
  if [ "$from" = data ]; then return 1; fi
  if [ "$from" = eval ]; then
    case "$to" in config | model | data) return 0 ;; *) return 1 ;; esac
  fi
  if [ "$to" = eval ]; then
    [ "$from" = cli ]
    return
  fi
  if [ "$to" = data ]; then
    # Batches and tokenizers are read by the training loop and the command line.
    [ "$from" = train ] || [ "$from" = cli ]
    return
  fi
  local rf rt
  rf=$(rank "$from")
  rt=$(rank "$to")
  [ "$rf" -ge 0 ] && [ "$rt" -ge 0 ] && [ "$rt" -le "$rf" ]
}

status=0
while IFS= read -r -d '' file; do
  from=${file%%/*}
  while IFS= read -r line; do
    to=$(sed -E 's/^#include "([a-z_]+)\/.*/\1/' <<<"${line#*:}")
    if ! allowed "$from" "$to"; then
      echo "layering: src/$file:${line%%:*} includes $to/ from $from/: ${line#*:}" >&2
      status=1
    fi
  done < <(grep -nE '^#include "[a-z_]+/' "$file" || true)
done < <(find . -type f \( -name '*.cpp' -o -name '*.hpp' -o -name '*.inc' \) -printf '%P\0')

if [ "$status" -eq 0 ]; then
  echo "layering: every include goes to the same or a lower layer"
fi
exit "$status"
