#!/usr/bin/env bash
# Builds the policy fuzzer with clang (libFuzzer + AddressSanitizer + UBSan) in build-fuzz and
# runs it for a fixed number of iterations over the seed corpus (tests/fuzz/corpus: the built-in
# policies and the golden error cases). Exit status: 0 when no crash was found.
#   FUZZ_RUNS=20000 (default)   FUZZ_JOBS=2 (build parallelism)
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS="${FUZZ_RUNS:-20000}"
CXX_BIN="$(command -v clang++ || command -v clang++-14 || true)"
CC_BIN="$(command -v clang || command -v clang-14 || true)"
if [[ -z "$CXX_BIN" || -z "$CC_BIN" ]]; then
  echo "fuzz.sh: clang is not installed; skipping the fuzzer" >&2
  exit 0
fi
cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_C_COMPILER="$CC_BIN" -DCMAKE_CXX_COMPILER="$CXX_BIN" \
  -DKVEVICT_FUZZ=ON -DKVEVICT_CUDA=OFF -DKVEVICT_BENCH=OFF > /dev/null
cmake --build build-fuzz -j"${FUZZ_JOBS:-2}" --target policy_fuzzer
work="build-fuzz/fuzz-corpus"
mkdir -p "$work"
# New inputs go to $work; the checked-in seed corpus is read only.
UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 ASAN_OPTIONS=detect_leaks=1 \
  ./build-fuzz/tests/fuzz/policy_fuzzer -runs="$RUNS" -max_len=4096 -timeout=10 -rss_limit_mb=2048 \
  -artifact_prefix=build-fuzz/ "$work" tests/fuzz/corpus
