#!/usr/bin/env bash
# Builds every libFuzzer target (tests/fuzz, clang + AddressSanitizer + UBSan) in build-fuzz,
# writes the seed corpora with fuzz_seeds (valid files of each input surface, never committed),
# and runs each target for a fixed budget over its corpus. Exit status: 0 when no target found a
# crash, leak, timeout or out-of-memory; the failing input is left as build-fuzz/<target>-crash-*.
#   FUZZ_SECONDS=30 (per target, default)  FUZZ_RUNS=N (per target, instead of seconds)
#   FUZZ_TARGETS="gguf policy ..." (default: all)  FUZZ_JOBS=2 (build parallelism)
#   KVEVICT_SHARED_DIR (default ../shared; stories260K is needed by the tokenizer and llama2c targets)
set -euo pipefail
cd "$(dirname "$0")/.."
CXX_BIN="$(command -v clang++ || command -v clang++-14 || true)"
CC_BIN="$(command -v clang || command -v clang-14 || true)"
if [[ -z "$CXX_BIN" || -z "$CC_BIN" ]]; then
  echo "fuzz.sh: clang is not installed; skipping the fuzzers" >&2
  exit 0
fi
SHARED="${KVEVICT_SHARED_DIR:-$(cd .. && pwd)/shared}"
ALL="policy gguf safetensors hf_config hf_tokenizer llama2c spm_tokenizer_bin tokenizer_text eval_config longbench"
TARGETS="${FUZZ_TARGETS:-$ALL}"
source scripts/compiler-cache.sh
cmake -S . -B build-fuzz -G Ninja "${KVEVICT_LAUNCHER[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_C_COMPILER="$CC_BIN" -DCMAKE_CXX_COMPILER="$CXX_BIN" -DKVEVICT_SHARED_DIR="$SHARED" \
  -DKVEVICT_FUZZ=ON -DKVEVICT_CUDA=OFF -DKVEVICT_BENCH=OFF > /dev/null
build_targets=(fuzz_seeds)
for t in $TARGETS; do build_targets+=("${t}_fuzzer"); done
cmake --build build-fuzz -j"${FUZZ_JOBS:-2}" --target "${build_targets[@]}"

seeds="build-fuzz/fuzz-seeds"
rm -rf "$seeds"
./build-fuzz/tests/fuzz/fuzz_seeds "$seeds" "$PWD"

# Per-target input bounds: large enough for every seed and for hostile counts, small enough that
# an out-of-memory is a bug (a declared count that is allocated instead of refused), not a
# legitimately huge input.
max_len() {
  case "$1" in
    gguf) echo 131072 ;;
    safetensors|llama2c) echo 65536 ;;
    spm_tokenizer_bin|hf_tokenizer) echo 32768 ;;
    *) echo 8192 ;;
  esac
}
if [[ -n "${FUZZ_RUNS:-}" ]]; then budget="-runs=$FUZZ_RUNS"; else budget="-max_total_time=${FUZZ_SECONDS:-30}"; fi
status=0
for t in $TARGETS; do
  if [[ "$t" == tokenizer_text || "$t" == llama2c ]] && [[ ! -f "$SHARED/models/stories260K/tok512.bin" ]]; then
    echo "fuzz.sh: $t skipped: stories260K not found under $SHARED" >&2
    continue
  fi
  work="build-fuzz/fuzz-corpus/$t"  # new inputs go here; the seeds stay as generated
  mkdir -p "$work" "$seeds/$t"
  echo "fuzz.sh: $t ($budget)"
  # intercept_tls_get_addr=0: see scripts/sanitize.sh (an LSan tracer crash with dlopen'ed TLS).
  if ! UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 ASAN_OPTIONS=detect_leaks=1:intercept_tls_get_addr=0 OMP_NUM_THREADS=1 \
      "./build-fuzz/tests/fuzz/${t}_fuzzer" "$budget" -max_len="$(max_len "$t")" -timeout=10 -rss_limit_mb=2048 \
      -print_final_stats=1 -artifact_prefix="build-fuzz/${t}-" "$work" "$seeds/$t" 2>&1 | tail -n 40; then
    status=1
  fi
done
exit $status
