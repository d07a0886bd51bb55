#!/usr/bin/env bash
# The whole test suite: set up, then build with warnings as errors and run every test; build
# again with AddressSanitizer + UndefinedBehaviorSanitizer and run every test; build the
# libFuzzer targets and run each briefly; check formatting.
set -euo pipefail
cd "$(dirname "$0")/.."

# Objects carry line tables only (NANOGPT_DEBUG_INFO=lines): enough for every report, and the
# three build directories then fit CI's disk with room to spare.
scripts/setup.sh build-ci -DNANOGPT_WERROR=ON -DNANOGPT_DEBUG_INFO=lines
(cd build-ci && ctest --output-on-failure -j "$(nproc)")

scripts/setup.sh build-asan -DNANOGPT_WERROR=ON -DNANOGPT_SANITIZE=ON -DCMAKE_BUILD_TYPE=Debug \
  -DCMAKE_CXX_FLAGS="-O1" -DNANOGPT_DEBUG_INFO=lines
(cd build-asan && ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
  ctest --output-on-failure -j "$(nproc)")

# Fuzz targets: built with clang's libFuzzer; a short run each keeps them working.
cmake -S . -B build-fuzz -DCMAKE_CXX_COMPILER=clang++ -DNANOGPT_FUZZ=ON -DNANOGPT_TESTS=OFF \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo -DNANOGPT_DEBUG_INFO=lines >/dev/null
# Only the fuzz targets (and the library they link): the command-line tool is built and tested
# above, and compiling it again with clang's instrumentation costs CI minutes it is short of.
mapfile -t fuzz_targets < <(for f in fuzz/fuzz_*.cpp; do basename "$f" .cpp; done)
cmake --build build-fuzz -j "$(nproc)" --target "${fuzz_targets[@]}"
for target in build-fuzz/fuzz_*; do
  [ -x "$target" ] || continue
  echo "fuzzing $(basename "$target") for 15 s"
  corpus=$(mktemp -d)
  "$target" -max_total_time=15 -rss_limit_mb=2048 -print_final_stats=0 "$corpus" 2>&1 | tail -n 2
  rm -rf "$corpus"
done

# Layers: no lower layer includes a higher one (also a ctest test, "layering").
scripts/check_layers.sh

# Style: every C++ file as .clang-format says.
mapfile -t sources < <(git ls-files '*.cpp' '*.hpp')
clang-format --dry-run -Werror "${sources[@]}"
echo "clang-format: ${#sources[@]} files clean"
