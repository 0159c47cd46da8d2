#!/usr/bin/env bash
# The one prepared script for an accelerator machine (CUDA toolkit, CMake, Python, no package
# registry, at most 64 MiB of files with the working tree):
#   1. unpacks the Debian packages brought in .device-debs/ (scripts/device-fetch-debs.sh) with
#      `dpkg -x` into a private prefix (never into /); without dpkg, Python unpacks the .deb files
#   2. configures and builds kvevict with CUDA (tests and benchmarks)
#   3. runs the GPU tests (every test binary; GPU tests no longer skip here): one process per test
#      suite, up to --test-jobs of them at once; then writes the correctness verdict (verdict.txt)
#   3b. when the toolkit has compute-sanitizer: the kernel tests again under its memcheck tool (any
#      out-of-bounds or misaligned device access, or a leak of device memory, fails the step), both
#      binaries at once, each for at most 100 s; then writes the verdict again, memcheck included
#   3d. the GPU benchmarks, in what is left of the budget (at least the last 150 s of it), each
#      with a slice: agreement, bench_gpu_decode (the bulk: 32K, 128K, then 4K), then bench_jit,
#      the kernel benchmarks and SpindleKV's codebook graph (host vs device); each publishes its
#      output to $OUT when it ends
#   4. prints a summary table (and summary.json); logs go to $OUT (when set) or device-check-out/
# One deadline, the budget: the build, each test suite (its limit set when it starts), memcheck and
# each benchmark run under timeout within it. Every recorded row is published to $OUT at once, with a
# provisional verdict ("INCOMPLETE: ...") until the final one, so a call killed at any time returns
# its state so far; TERM and INT publish it before the script exits.
# Both verdicts are written and published before any benchmark. Planned for the default budget:
# with a 107 s build the first verdict comes at about 170 s, memcheck ends by 270 s, and the
# benchmarks have the last 150 s (or more, when memcheck finishes early): enough for the agreement
# and the micro-benchmarks, not for bench_gpu_decode, which runs only with 75 s past their 85 s.
# The issue's 128K rows need the two calls below (about 200 s for bench_gpu_decode in the second).
#
# In two calls (--stage tests, then --stage bench on the still-warm machine, whose build-device/ is
# kept between calls): the first call's verdict comes back even if the machine is lost during the
# benchmarks (the 2026-12-05 call lost everything that way). A cold second call builds again.
#
# Usage: scripts/device-check.sh [--debs DIR] [--jobs N] [--test-jobs N] [--quick] [--budget SECONDS]
#                                [--stage all|tests|bench]
#   --jobs: build jobs (default: the cores)
#   --test-jobs: GPU test suites run at once (default: half the cores, at least 1)
#   --quick: only the jit tests and bench_jit (when device time is short)
#   --budget: wall seconds for the whole script (default 420); the build stops 90 s before its end
#     (--stage tests; 240 s with all, 110 s with bench), suites that would start with under 10 s left
#     are not started (a note, and no PASS); the benchmarks get what the build, the tests and memcheck leave (memcheck never runs
#     into the last 150 s), and are cut (with a note) rather than overrun it
#   --stage: all (default: steps 1-4 in one call); tests (1, 2, 3-3c and 4: the verdict, no
#     benchmark, no time kept for them); bench (1, 2 (no-ops over a kept build, else only the
#     bench targets), 3d and 4: the benchmarks and the CPU suite, the tests stage's verdict carried
#     into the summary; a benchmark cut at its cap is a note)
# Exit status: 0 when every step passed (and every GPU suite ran), 1 otherwise.
set -uo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
debs="$root/.device-debs"
cores="$(nproc 2>/dev/null || echo 4)"
jobs="$cores"
test_jobs=$(( cores / 2 ))
quick=0
stage=all
budget=420  # seconds: with the machine's start this leaves 4+ minutes of a 15-minute lease for a rerun
bench_reserve=150  # the last seconds of the budget, kept for the benchmarks: memcheck never eats into them
memcheck_cap=100   # seconds per memcheck binary (the two run at once)
suite_cap=120      # seconds per GPU test suite at most (the slowest took 35 s on the H200)
while (( $# )); do
  case "$1" in
    --debs) debs="$2"; shift 2 ;;
    --jobs) jobs="$2"; shift 2 ;;
    --test-jobs) test_jobs="$2"; shift 2 ;;
    --quick) quick=1; shift ;;
    --budget) budget="$2"; shift 2 ;;
    --stage) stage="$2"; shift 2 ;;
    *) echo "device-check: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
(( test_jobs < 1 )) && test_jobs=1
case "$stage" in  # build_reserve: the seconds the build leaves for what follows it
  all) build_reserve=$(( bench_reserve + 90 )) ;;
  tests) bench_reserve=0; build_reserve=90 ;;  # nothing runs after the verdict: memcheck may use the whole budget
  bench) build_reserve=110 ;;  # the agreement and the micro-benchmarks
  *) echo "device-check: --stage must be all, tests or bench, not '$stage'" >&2; exit 2 ;;
esac
# The deadlines, in seconds of this script ($SECONDS): the build's, then the tests' (the suites and
# memcheck; 10 s before the benchmarks' reserve, for timeout's kill and the verdict).
build_deadline=$(( budget - build_reserve ))
tests_deadline=$(( budget - bench_reserve - 10 ))
left() { echo $(( budget - SECONDS )); }
until_s() { local s=$(( $1 - SECONDS )); (( s > 0 )) || s=1; echo "$s"; }  # DEADLINE: seconds left to it (1 at least: timeout 0 never stops)

# Logs go to device-check-out/; the device tool brings back at most 8 files from $OUT, so publish
# (below) copies there only verdict.txt, summary.tsv, summary.json and one tarball of every log,
# after every recorded row; the benchmarks write their JSON straight into $OUT (a kill keeps it).
out="$root/device-check-out"
json_dir="${OUT:-$out}"
# The bench stage carries the tests stage's verdict (same machine, kept folder) into its summary.
previous_verdict="not checked in this call (--stage bench: see the tests stage's verdict.txt)"
if [[ "$stage" == bench && -f "$out/verdict.txt" ]]; then
  previous_verdict="$(sed -n 's/^correctness verdict: //p' "$out/verdict.txt" | head -n1) (the tests stage's)"
fi
rm -rf "$out" && mkdir -p "$out" "$json_dir"
prefix="$root/build-device/prefix"
build="$root/build-device/build"
summary="$out/summary.tsv"
: > "$summary"
failures=0
not_started=0  # GPU suites never started (the budget ran out): the verdict cannot be PASS
verdict="$previous_verdict"
phase="nothing checked yet"  # what a provisional verdict names as not done; empty once a verdict is final
[[ "$stage" == bench ]] && phase=""  # the bench stage writes no verdict, only its rows
# One JSON object: the steps, the verdict, and the benchmarks' JSON when they wrote it.
write_summary_json() {
  python3 - "$summary" "$json_dir" "$verdict" "$out/summary.json" <<'PY' || echo "device-check: summary.json not written"
import json, os, sys
summary, json_dir, verdict, target = sys.argv[1:5]
rows = [(line.rstrip("\n").split("\t") + [""] * 4)[:4] for line in open(summary)]
result = {"verdict": verdict, "steps": [{"step": name.strip(), "status": status, "seconds": int(seconds or 0),
                                         "note": note} for name, status, seconds, note in rows]}
for name in ("bench_gpu_decode", "bench_gpu_agreement"):
    try: result[name] = json.load(open(os.path.join(json_dir, name + ".json")))
    except (OSError, ValueError): pass  # not written (yet)
json.dump(result, open(target + ".tmp", "w"), indent=2)
os.replace(target + ".tmp", target)
PY
}
publish() {
  write_summary_json
  [[ -n "${OUT:-}" ]] || return 0
  local f
  for f in verdict.txt summary.tsv summary.json; do
    [[ -f "$out/$f" ]] && cp "$out/$f" "$OUT/$f.tmp" && mv -f "$OUT/$f.tmp" "$OUT/$f"
  done
  tar -czf "$OUT/logs.tmp.tar.gz" -C "$out" --exclude='*.tar.gz' --exclude='*.pid' . 2>/dev/null  # exit 1 when a log grew meanwhile
  mv -f "$OUT/logs.tmp.tar.gz" "$OUT/logs.tar.gz"
  return 0
}
# write_verdict WHAT [PENDING]: the verdict so far (PENDING: what has not finished; the verdict is
# then provisional), to verdict.txt and summary.json, and published.
write_verdict() {
  local pending="${2:-}"
  (( not_started )) && pending="${pending:+$pending; }$not_started GPU suites not started (the budget ran out)"
  if (( failures )); then verdict="FAIL ($failures failing steps${pending:+; INCOMPLETE: $pending})"
  elif [[ -n "$pending" ]]; then verdict="INCOMPLETE: $pending (no failure so far)"
  else verdict="PASS"; fi
  echo "correctness verdict: $verdict (after $SECONDS s; $1)" > "$out/verdict.txt"
  [[ -n "${2:-}" ]] || cat "$out/verdict.txt"
  publish
}
# The state so far to $OUT: a provisional verdict until the tests' verdict is written, then the rows.
checkpoint() { if [[ -n "$phase" ]]; then write_verdict "so far" "$phase"; else publish; fi; }

# record STEP STATUS SECONDS NOTE: one row of the summary, published at once
record() { printf '%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$4" >> "$summary"; [[ "$2" == FAIL ]] && failures=$((failures + 1)); checkpoint; return 0; }
on_signal() {  # SIGNAL: stops what runs, records the stop and publishes the state so far
  trap - TERM INT
  local p  # each job, and each suite's or memcheck's timeout (in its own process group): it passes TERM on
  for p in $(jobs -p) $(cat "$out"/*.pid 2>/dev/null); do kill "$p" 2>/dev/null; done
  [[ -z "$phase" ]] || phase="stopped by SIG$1 during: $phase"
  record "device-check" note "$SECONDS" "stopped by SIG$1"
  echo "device-check: stopped by SIG$1 after $SECONDS s; the state so far is in \$OUT" >&2
  exit 1
}
trap 'on_signal TERM' TERM; trap 'on_signal INT' INT

# Benchmarks print line by line into their logs, so that one cut by timeout keeps its figures.
linebuf=()
command -v stdbuf >/dev/null && linebuf=(stdbuf -oL)

# step NAME LOGFILE COMMAND...: runs, times and records one step; returns the command's status.
# With cut_ok=1 (cut_ok=1 step ...) an exit at timeout's limit (124, or 137 after -k) is a note.
step() {
  local name="$1" log="$2" start=$SECONDS rc took; shift 2
  echo "== $name"
  "$@" > "$log" 2>&1 &  # in the background, so that TERM is handled at once
  wait $!; rc=$?; took=$((SECONDS - start))
  if (( rc == 0 )); then record "$name" ok "$took" "$(basename "$log")"
  elif (( rc == 124 || rc == 137 )) && (( ${cut_ok:-0} )); then record "$name" note "$took" "cut at its cap; partial figures kept (see $(basename "$log"))"
  elif (( rc == 124 || rc == 137 )); then record "$name" FAIL "$took" "cut at its time limit (exit $rc), see $(basename "$log")"; tail -n 25 "$log"
  else record "$name" FAIL "$took" "exit $rc, see $(basename "$log")"; tail -n 25 "$log"; fi
  return $rc
}
# capped NAME LOGFILE DEADLINE COMMAND...: a step under timeout until DEADLINE, or a note (status 1)
# when under 10 s are left to it.
capped() {
  local name="$1" log="$2" limit; limit="$(until_s "$3")"; shift 3
  if (( limit < 10 )); then record "$name" note 0 "not run: the time budget is spent"; return 1; fi
  step "$name" "$log" timeout -k 10 "$limit" "$@"
}

# ---- 1. private prefix from the .deb files -------------------------------------------------
unpack_debs() {
  local files=()
  local deb
  for deb in "$debs"/*.deb; do [[ -f "$deb" ]] && files+=("$deb"); done  # no nullglob: it would leak out
  if (( ${#files[@]} == 0 )); then echo "no .deb files in $debs (run scripts/device-fetch-debs.sh first)"; return 1; fi
  rm -rf "$prefix" && mkdir -p "$prefix"
  for deb in "${files[@]}"; do
    if command -v dpkg >/dev/null; then
      dpkg -x "$deb" "$prefix" || return 1
    else
      # A .deb is an ar archive holding data.tar.*; unpack that member into the prefix.
      python3 - "$deb" "$prefix" <<'PY' || return 1
import io, sys, tarfile
path, prefix = sys.argv[1], sys.argv[2]
data = open(path, "rb").read()
assert data[:8] == b"!<arch>\n", f"{path}: not an ar archive"
pos = 8
while pos + 60 <= len(data):
    name = data[pos:pos + 16].decode().strip().rstrip("/")
    size = int(data[pos + 48:pos + 58].decode().strip())
    body = data[pos + 60:pos + 60 + size]
    if name.startswith("data.tar"):
        with tarfile.open(fileobj=io.BytesIO(body), mode="r:*") as tar:
            tar.extractall(prefix)
        break
    pos += 60 + size + (size & 1)
else:
    sys.exit(f"{path}: no data.tar member")
PY
    fi
    echo "unpacked $(basename "$deb")"
  done
  # dpkg -x runs no maintainer scripts, so the alternatives that expose OpenBLAS as
  # libopenblas.so / libblas.so are missing: make them by hand inside the prefix.
  local lib="$prefix/usr/lib/$multiarch"
  local lib_name
  for lib_name in libopenblas.so libopenblas.so.0 libblas.so libblas.so.3; do
    [[ -e "$lib/openblas-pthread/$lib_name" && ! -e "$lib/$lib_name" ]] && ln -s "openblas-pthread/$lib_name" "$lib/$lib_name"
  done
  return 0
}

multiarch="$(gcc -print-multiarch 2>/dev/null || echo x86_64-linux-gnu)"
[[ -n "$multiarch" ]] || multiarch=x86_64-linux-gnu
if [[ "$stage" == bench && -f "$prefix/.unpacked" ]]; then
  record "unpack packages" note 0 "kept from the tests stage"
else
  step "unpack packages" "$out/unpack.log" unpack_debs && touch "$prefix/.unpacked"
fi
export PATH="$prefix/usr/bin:/usr/local/cuda/bin:$PATH"
export LD_LIBRARY_PATH="$prefix/usr/lib/$multiarch:$prefix/usr/lib/$multiarch/openblas-pthread:/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export LIBRARY_PATH="$prefix/usr/lib/$multiarch${LIBRARY_PATH:+:$LIBRARY_PATH}"

# ---- 2. configure and build with CUDA ----------------------------------------------------------
gpu_arch="$(timeout 20 nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -n1 | tr -d ' .')"
[[ -n "$gpu_arch" ]] || gpu_arch=90
generator="Unix Makefiles"
command -v ninja >/dev/null && generator=Ninja
configure() {  # LIMIT: seconds
  timeout -k 10 "$1" cmake -S "$root" -B "$build" -G "$generator" -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_PREFIX_PATH="$prefix/usr" \
    -DCMAKE_LIBRARY_PATH="$prefix/usr/lib/$multiarch" \
    -DKVEVICT_CBLAS_INCLUDE="$prefix/usr/include/$multiarch/openblas-pthread" \
    -DCMAKE_CUDA_COMPILER="$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)" \
    -DCMAKE_CUDA_ARCHITECTURES="$gpu_arch" \
    -DKVEVICT_CUDA=ON -DKVEVICT_TESTS=ON -DKVEVICT_BENCH=ON "${shared_args[@]}"
}
# The carried test models (scripts/device-fetch-debs.sh), laid out as ../shared is.
shared_args=()
[[ -d "$root/.device-shared/models" ]] && shared_args=(-DKVEVICT_SHARED_DIR="$root/.device-shared")
# FlashInfer's headers and their CCCL (scripts/fetch-flashinfer.sh --pack, carried in
# .device-flashinfer/): the FlashInfer prefill attention is built when they came along.
flashinfer_pack="$root/.device-flashinfer/flashinfer.tar.gz"
if [[ -f "$flashinfer_pack" ]] && (( gpu_arch >= 80 )); then  # FlashInfer needs sm_80 or newer
  mkdir -p "$build/flashinfer"
  if tar xzf "$flashinfer_pack" -C "$build/flashinfer"; then
    shared_args+=(-DKVEVICT_FLASHINFER_DIR="$build/flashinfer")
  else
    echo "device-check: $flashinfer_pack did not unpack; building without FlashInfer" >&2
  fi
fi
# The build's fingerprint: the bench stage reuses the tests stage's build when the sources and
# the configuration (the architecture, the carried models and FlashInfer) are the same, whatever
# the files' modification times (the device tool copies the working tree again for each call; new
# times would make ninja rebuild everything, about 2 minutes of the budget). Only a complete build
# writes it, and every configure removes it first.
sources_stamp() {
  { echo "sm_$gpu_arch ${shared_args[*]}"
    (cd "$root" && find CMakeLists.txt cmake core dsl jit cli evals bench tests -type f \
       \( -name '*.cpp' -o -name '*.cu' -o -name '*.h' -o -name '*.cuh' -o -name '*.inc' -o -name '*.txt' \
          -o -name '*.cmake' -o -name '*.in' \) -print0 2>/dev/null | sort -z | xargs -0 sha1sum)
  } | sha1sum | cut -d' ' -f1
}
stamp_file="$root/build-device/sources.sha1"
stamp="$(sources_stamp)"
bench_only_build=0  # the bench stage built its own targets only (no test binary for ctest)
if [[ "$stage" == bench && -f "$stamp_file" && "$(cat "$stamp_file")" == "$stamp" && -x "$build/bench/bench_gpu_decode" ]]; then
  record "configure and build" note 0 "kept from the tests stage (the same sources and configuration)"
else
rm -f "$stamp_file"
[[ -n "$phase" ]] && phase="the build and the GPU tests not finished"
step "configure (CUDA sm_$gpu_arch, $generator)" "$out/configure.log" configure "$(until_s "$build_deadline")"
if [[ "$generator" == Ninja ]]; then  # how much the build has to do (a bench stage on a kept build: nothing)
  pending="$(ninja -C "$build" -n 2>/dev/null | grep -c '^\[' || true)"
  record "build steps pending" note 0 "${pending:-?} (ninja -n)"
fi
# Each build stops at $build_deadline s (the budget less what the tests and benchmarks need).
if [[ "$stage" == bench ]]; then  # a cold bench stage: only what the benchmarks below run
  bench_only_build=1
  bench_targets=(kvevict write_synthetic_model bench_gpu_agreement bench_gpu_decode bench_jit bench_ragged_attention
                 bench_device_topk bench_device_kv bench_codebook_build)
  (( quick )) && bench_targets=(kvevict bench_jit)
  capped "build the bench targets" "$out/build.log" "$build_deadline" cmake --build "$build" -j "$jobs" --target "${bench_targets[@]}"
elif (( quick )); then
  capped "build jit targets" "$out/build.log" "$build_deadline" cmake --build "$build" -j "$jobs" --target kvevict kvevict_jit_tests bench_jit
elif capped "build everything" "$out/build.log" "$build_deadline" cmake --build "$build" -j "$jobs"; then
  echo "$stamp" > "$stamp_file"
else
  capped "build jit targets (fallback)" "$out/build-jit.log" "$build_deadline" cmake --build "$build" -j "$jobs" --target kvevict kvevict_jit_tests bench_jit
fi
fi  # configure and build
[[ -n "$phase" ]] && { phase="the GPU tests not started yet"; checkpoint; }

# ---- 3. GPU checks -------------------------------------------------------------------------------
# The GPU tests first (every test whose name says it needs a device: Gpu, Cuda, OnTheDevice), then
# the correctness verdict is written ($out/verdict.txt) and published; then memcheck, after which
# the verdict is written again with its result, all BEFORE any benchmark runs, so a lease cut short
# during memcheck or the benchmarks still leaves a verdict. The rest of the suite (CPU tests, CI's
# job) runs afterwards through ctest, in parallel, only while time is left.
kvevict="$build/kvevict"
[[ -x "$kvevict" ]] && step "kvevict devices --device cuda" "$out/devices.log" timeout 20 "$kvevict" devices --device cuda
export KVEVICT_CACHE_DIR="$build/kernel-cache"
if [[ "$stage" != bench ]]; then
gpu_filter='*Gpu*:*Cuda*:*OnTheDevice*:*DeviceKv*'
# Each launch synchronises (core/decode/cuda/launch_status.h), so a kernel fault is named after its
# kernel; each test suite runs in its own process, so a fault (which breaks the CUDA context)
# fails its suite only, not every GPU test after it.
export KVEVICT_CUDA_SYNC_LAUNCHES=1
# "Suite.Test:Suite.Test2 ..." per suite, one line each, from a --gtest_list_tests listing on stdin.
suite_filters() {
  awk '
    /^[^ ]/ { if (tests != "") print tests; suite = $1; tests = ""; next }
    /^  /   { sub(/^ +/, ""); sub(/ .*/, ""); tests = tests (tests == "" ? "" : ":") suite $0 }
    END     { if (tests != "") print tests }'
}
# gtest_problem LOG [CUT]: what a gtest run's log (a suite, or memcheck) shows wrong, or nothing: an
# error compute-sanitizer reported, a failed test, or (in a run not cut) no test run at all.
gtest_problem() {
  if grep -Eq '^========= ((Invalid|Leaked|Program hit|Race|Uninitialized|Out-of-range|Misaligned|Malloc|Free|Address|Barrier|Unspecified)|(ERROR|LEAK) SUMMARY: [1-9])' "$1"; then
    echo "compute-sanitizer reported errors"
  elif grep -q '^\[  FAILED  \]' "$1"; then
    echo "a test failed"
  elif (( ! ${2:-0} )) && ! grep -Eq '^\[==========\] [1-9][0-9]* tests? from .* ran|^\[  PASSED  \] [1-9]' "$1"; then
    echo "filter matched no test (0 tests ran)"
  fi
}
# The suites, in a stable order (binary, then gtest's order): their logs, XML and summary rows. A
# binary that cannot list its tests fails; how many GPU suites each one has is noted.
suite_names=(); suite_binaries=(); suite_tests=(); suite_logs=()
for binary in "$build"/tests/kvevict_*_tests; do
  [[ -x "$binary" ]] || continue
  name="$(basename "$binary")"
  if (( quick )) && [[ "$name" != kvevict_jit_tests ]]; then continue; fi
  listing="$(timeout -k 5 30 "$binary" --gtest_list_tests --gtest_filter="$gpu_filter" 2> "$out/$name.list.log")"; rc=$?
  if (( rc != 0 )); then echo "$listing" >> "$out/$name.list.log"
    record "$name --gtest_list_tests" FAIL 0 "exit $rc: its tests not listed, none run (see $name.list.log)"; continue; fi
  # Every GPU test must run here; a skip is listed (a missing model, or no device).
  found=0
  while IFS= read -r tests; do
    [[ -n "$tests" ]] || continue
    suite="${tests%%.*}"
    suite_names+=("$name $suite")
    suite_binaries+=("$binary")
    suite_tests+=("$tests")
    suite_logs+=("$out/$name.${suite//\//_}.log")
    found=$((found + 1))
  done < <(suite_filters <<< "$listing")
  record "$name: GPU suites" note 0 "$found match the filter"
done
(( ${#suite_names[@]} )) || record "GPU test suites" FAIL 0 "none found: no test binary built, or none listed a GPU suite"
# Up to --test-jobs suites at once (default: half the cores), each in its own process as above.
# They start slowest first (the NVRTC compiles: PolicyCodegen took 35 s, InverseCodegen 12 s of
# the 90 s the suites took one after another on the H200) and share the cores: OpenMP and OpenBLAS
# get cores / jobs threads each, waiting passively as under ctest. Each suite's limit is set when it
# starts: what is left to the tests' deadline, at most $suite_cap s; one still running then is
# stopped and fails. A suite with under 10 s left is not started (a note; the verdict says so).
suite_threads=$(( cores / test_jobs ))
(( suite_threads < 1 )) && suite_threads=1
run_suite() {  # INDEX LIMIT: runs one suite; its exit status and seconds go to <log>.status
  local i="$1" log="${suite_logs[$1]}" start=$SECONDS
  OMP_NUM_THREADS=$suite_threads OPENBLAS_NUM_THREADS=$suite_threads OMP_WAIT_POLICY=PASSIVE \
    timeout -k 5 "$2" "${suite_binaries[i]}" --gtest_brief=1 --gtest_filter="${suite_tests[i]}" \
    --gtest_output="xml:${log%.log}.xml" > "$log" 2>&1 &
  echo $! > "${log%.log}.pid"; wait $!
  echo "$? $((SECONDS - start)) $2" > "${log%.log}.status.tmp" && mv "${log%.log}.status.tmp" "${log%.log}.status"
}
# gtest_row NAME LOG CUT_NOTE: records a gtest run from <log>.status ("status seconds limit") and what
# gtest_problem finds in LOG; a run cut at its limit (124, 137 after -k) with nothing in its log is
# a note when CUT_NOTE is 1 (memcheck), else FAIL.
gtest_row() {
  local name="$1" log="$2" rc=1 took=0 limit="?" cut=0 problem
  [[ -f "${log%.log}.status" ]] && read -r rc took limit < "${log%.log}.status"
  rm -f "${log%.log}.status" "${log%.log}.pid"
  (( rc == 124 || rc == 137 )) && cut=1
  problem="$(gtest_problem "$log" "$cut")"
  if (( rc == 0 )) && [[ -z "$problem" ]]; then record "$name" ok "$took" "$(basename "$log")"; return 0; fi
  if (( cut && $3 )) && [[ -z "$problem" ]]; then record "$name" note "$took" "cut at $limit s, no error in its log before the cut"; return 0; fi
  (( cut )) && problem="${problem:+$problem, }stopped at $limit s"
  record "$name" FAIL "$took" "${problem:-exit $rc}, see $(basename "$log")"; tail -n 25 "$log"
}
suite_row() {  # INDEX: records a suite that ended (or whose process is gone), and publishes
  local i="$1" log="${suite_logs[$1]}" skipped
  finished=$((finished + 1)); phase="GPU suites: $finished of ${#suite_names[@]} ended"
  gtest_row "${suite_names[i]}" "$log" 0
  skipped=$(grep -o 'result="skipped"' "${log%.log}.xml" 2>/dev/null | wc -l)
  (( skipped > 0 )) && record "  ${suite_names[i]#* } skipped" note 0 "$skipped GPU tests skipped (see $(basename "$log"))"
  return 0
}
wait_suites() {  # MAX: polls until at most MAX suites run, recording each as it ends
  local i still
  while (( ${#running[@]} > $1 )); do
    sleep 0.5; still=()
    for i in "${running[@]}"; do
      if [[ -f "${suite_logs[i]%.log}.status" ]] || ! kill -0 "${suite_pids[i]}" 2>/dev/null; then suite_row "$i"; else still+=("$i"); fi
    done
    running=("${still[@]}")
  done
}
order=()
for i in "${!suite_names[@]}"; do [[ "${suite_names[i]}" =~ Codegen|Jit ]] && order+=("$i"); done
for i in "${!suite_names[@]}"; do [[ "${suite_names[i]}" =~ Codegen|Jit ]] || order+=("$i"); done
suites_start=$SECONDS
running=(); suite_pids=(); finished=0
phase="GPU suites: 0 of ${#suite_names[@]} ended"
for i in "${order[@]}"; do
  wait_suites $((test_jobs - 1))
  limit="$(until_s "$tests_deadline")"
  (( limit > suite_cap )) && limit=$suite_cap
  if (( limit < 10 )); then not_started=$((not_started + 1))
    record "${suite_names[i]}" note 0 "not started: under 10 s left to the tests' deadline"; continue; fi
  echo "== ${suite_names[i]} (limit $limit s)"
  run_suite "$i" "$limit" &
  suite_pids[i]=$!
  running+=("$i")
done
wait_suites 0
if (( ${#suite_names[@]} > 0 )); then
  record "GPU test suites (${#suite_names[@]}, $test_jobs at a time)" note $((SECONDS - suites_start)) \
    "wall time of them all; each suite's own row above, in the order they ended"
fi

# ---- 3a. the verdict of the GPU tests, published before memcheck -----------------------------------
phase=""
write_verdict "the GPU tests; memcheck next"

# ---- 3b. the GPU tests under compute-sanitizer (memcheck) ------------------------------------------
# Only the tests that launch kernels (the rest gain nothing and are slow under the tool); the test
# that provokes launch errors on purpose is left out, since the tool reports those as API errors.
sanitizer="$(command -v compute-sanitizer || true)"
[[ -z "$sanitizer" && -x /usr/local/cuda/bin/compute-sanitizer ]] && sanitizer=/usr/local/cuda/bin/compute-sanitizer
# Both binaries run at once, each for at most $memcheck_cap s and never past the tests' deadline
# (before the last $bench_reserve s of the budget, kept for the benchmarks); a run cut by its time
# limit is a note when its log shows no error before the cut (exit status 124 of timeout), else FAIL.
memcheck() {  # NAME FILTER LIMIT: exit status and seconds go to <log>.status
  local name="$1" filter="$2" limit="$3" log="$out/$1.memcheck.log" start=$SECONDS
  timeout -k 5 "$limit" "$sanitizer" --tool memcheck --leak-check full --error-exitcode 1 \
    "$build/tests/$name" --gtest_brief=1 --gtest_filter="$filter" > "$log" 2>&1 &
  echo $! > "${log%.log}.pid"; wait $!
  echo "$? $((SECONDS - start)) $limit" > "${log%.log}.status"
}
if [[ -n "$sanitizer" ]]; then
  declare -A gpu_filters=(
    [kvevict_jit_tests]='GpuKernels.*:JitPolicyProgram.GpuBackend*:WindowAttentionInPlaceGpu.*:LayerWeightCodegenGpu.*:TableAxesCodegen.*OnTheDevice:-GpuKernels.LaunchErrorsAreReportedNotIgnored'
    [kvevict_core_tests]='CudaDecoder.*:*DeviceKv*:RaggedAttentionGpu.*:DeviceSelectionGpu.*:LayerSelectorEngineGpu.*:WindowAttentionGpu.*:WindowAttentionSignalGpu.*:AccumulatedAttentionGpu.*:LayerSelectorGpu.*:CodebookGraphGpu.*:QueryStatisticsGpu.*:SegmentAttentionGpu.*:ReplayAttentionGpu.*:HiddenStatesGpu.*:FlashInferPrefillGpu.*-CudaDecoder.PromptLonger*'
  )
  memcheck_limit=$(( tests_deadline - SECONDS ))
  (( memcheck_limit > memcheck_cap )) && memcheck_limit=$memcheck_cap
  memcheck_names=()
  for name in kvevict_jit_tests kvevict_core_tests; do
    [[ -x "$build/tests/$name" ]] || continue
    if (( quick )) && [[ "$name" != kvevict_jit_tests ]]; then continue; fi
    memcheck_names+=("$name")
    if (( memcheck_limit < 20 )); then continue; fi
    echo "== compute-sanitizer memcheck: $name (limit $memcheck_limit s)"
    memcheck "$name" "${gpu_filters[$name]}" "$memcheck_limit" &
  done
  wait
  for name in "${memcheck_names[@]}"; do
    step_name="compute-sanitizer memcheck: $name" log="$out/$name.memcheck.log"
    if (( memcheck_limit < 20 )); then record "$step_name" note 0 "not run: under 20 s left before the tests' deadline"; continue; fi
    gtest_row "$step_name" "$log" 1
  done
else
  record "compute-sanitizer" note 0 "not in the toolkit on this machine: memcheck step skipped"
fi

# ---- 3c. the verdict again, memcheck included, before any benchmark --------------------------------
write_verdict "the GPU tests and memcheck"
fi  # stage != bench
unset KVEVICT_CUDA_SYNC_LAUNCHES  # the benchmarks time unsynchronised launches

# ---- 3d. benchmarks, within what is left of the budget ---------------------------------------------
if [[ "$stage" != tests ]]; then
# Every benchmark gets a slice, so that a short budget still measures each of the issue's figures
# once: the agreement first (5 s on the H200), then bench_gpu_decode (the issue's headline rows)
# with all but the last $micro_reserve s, which bench_jit (the JIT vs hand-written kernel) and the
# four micro-benchmarks share. Each step publishes what it produced before the next starts. They
# print line by line (stdbuf), so a cut keeps its figures: a benchmark cut at its cap is a note
# ("cut at its cap; partial figures kept"), not a failure of correctness.
micro_reserve=85
# micro_bench NAME CAP [ARGS...]: runs bench/NAME ARGS for at most CAP seconds and never the last 5
# of the budget.
micro_bench() {
  local bench="$build/bench/$1" cap="$2"
  local args=("${@:3}")
  [[ -x "$bench" ]] || { record "$1" note 0 "not built (see build.log)"; return 0; }
  (( $(left) > 15 )) || { record "$1" note 0 "not run: the time budget is spent"; return 0; }
  local limit=$(( $(left) - 5 ))
  (( limit > cap )) && limit=$cap
  # A benchmark cut by its slice measured what it printed before the cut: a note, not a failure.
  cut_ok=1 step "$1" "$out/$1.log" timeout -k 5 "$limit" "${linebuf[@]}" "$bench" "${args[@]}"
  return 0  # step published what came so far
}
# CPU vs GPU agreement on real weights (SmolLM2's first blocks, carried in .device-shared).
agreement_model=""
for candidate in "$root"/.device-shared/models/smollm2-135m-first*.gguf; do
  [[ -f "$candidate" ]] && { agreement_model="$candidate"; break; }
done
if [[ ! -x "$build/bench/bench_gpu_agreement" ]]; then
  record "bench_gpu_agreement" note 0 "not built (see build.log)"
elif [[ -n "$agreement_model" ]] && (( $(left) > 80 )); then
  limit=$(( $(left) - 60 ))
  (( limit > 30 )) && limit=30
  cut_ok=1 step "bench_gpu_agreement ($(basename "$agreement_model"))" "$out/bench_gpu_agreement.log" \
    timeout -k 5 "$limit" "${linebuf[@]}" "$build/bench/bench_gpu_agreement" --model "$agreement_model" \
    --json "$json_dir/bench_gpu_agreement.json"
elif [[ -z "$agreement_model" ]]; then
  record "bench_gpu_agreement" note 0 "skipped: no model carried (.device-shared/models/smollm2-135m-first*.gguf)"
else
  record "bench_gpu_agreement" note 0 "not run: $(left) s left, 80 needed"
fi
# bench_gpu_decode: 32K first (what 128K is estimated from), then 128K, then 4K; with FlashInfer's
# prefill the prefill runs come first (time to first token, the policy's share, decode latency and
# peak device memory, all at once), else the synthetic ones (the own f32 prefill takes minutes at
# 128K). It writes its JSON after every run, so a cut keeps what it measured.
decode_fills=synthetic,prefill
[[ -n "${shared_args[*]}" && "${shared_args[*]}" == *KVEVICT_FLASHINFER_DIR* ]] && decode_fills=prefill,synthetic
# The 8B weights from a file: write_synthetic_model writes synthetic:llama3.1-8b as a Hugging Face
# folder of F16 (16 GB) on this machine's disk (kept for a later call), and bench_gpu_decode loads it
# as a user's checkpoint loads (mapped, F16 as stored), so its host peak RSS is set against the
# file (issue 10: at most about 1.2x; "decoder made" line, host_peak_rss_over_weight_file). Writing
# it replaces drawing the 8B model in f32 in memory (16 s on the H200). When the disk lacks room,
# the write fails or kvevict model-info refuses the folder, the in-memory model runs instead.
decode_model=synthetic:llama3.1-8b
weights_dir="$build/synthetic-llama3.1-8b"
# The write gets at most 45 s (an estimated 10-20 s with the device's cores) and only what leaves
# bench_gpu_decode its 75 s after model-info's 30: a slow disk costs the benchmark's time, never
# its run.
write_limit=$(( $(left) - micro_reserve - 20 - 75 - 30 ))
(( write_limit > 45 )) && write_limit=45
if [[ -x "$build/bench/write_synthetic_model" && -x "$build/bench/bench_gpu_decode" && -x "$kvevict" ]] &&
   (( write_limit >= 20 )); then
  free_gib=$(( $(df -Pk "$build" | awk 'NR == 2 { print $4 }') / 1048576 ))
  if [[ ! -f "$weights_dir/model.safetensors" ]] && (( free_gib < 24 )); then
    record "write_synthetic_model" note 0 "not run: ${free_gib} GiB free on the disk; bench_gpu_decode draws the model in memory"
  else
    start_write=$SECONDS
    if [[ -f "$weights_dir/model.safetensors" ]] ||
       timeout "$write_limit" "$build/bench/write_synthetic_model" synthetic:llama3.1-8b "$weights_dir" > "$out/write_synthetic_model.log" 2>&1; then
      if timeout 30 "$kvevict" model-info "$weights_dir" > "$out/synthetic_model_info.log" 2>&1; then
        decode_model="$weights_dir"
        record "write_synthetic_model (synthetic:llama3.1-8b, F16 folder)" ok $((SECONDS - start_write)) "write_synthetic_model.log"
      else
        rm -rf "$weights_dir"  # a later call writes it again rather than meet the same refusal
        record "write_synthetic_model" note $((SECONDS - start_write)) "kvevict model-info refused the folder (synthetic_model_info.log): the in-memory model instead"
      fi
    else
      rm -rf "$weights_dir"
      record "write_synthetic_model" note $((SECONDS - start_write)) "failed or cut at ${write_limit} s (write_synthetic_model.log): the in-memory model instead"
    fi
  fi
fi
decode_limit=$(( $(left) - micro_reserve - 20 ))  # 20 s for the process's own teardown past --time-limit
# 75 s at least: its fixed cost (about 31 s: the 8B model and the decoder) and a first run.
if [[ -x "$build/bench/bench_gpu_decode" ]] && (( decode_limit >= 75 )); then
  cut_ok=1 step "bench_gpu_decode (limit ${decode_limit} s, $decode_fills)" "$out/bench_gpu_decode.log" \
    timeout -k 5 $(( decode_limit + 20 )) "${linebuf[@]}" "$build/bench/bench_gpu_decode" --model "$decode_model" \
    --time-limit "$decode_limit" --contexts 32768,131072,4096 --cache "$decode_fills" --json "$json_dir/bench_gpu_decode.json"
elif [[ -x "$build/bench/bench_gpu_decode" ]]; then
  record "bench_gpu_decode" note 0 "not run: ${decode_limit} s left for it, under 75"
else
  record "bench_gpu_decode" note 0 "not built (see build.log)"
fi
micro_bench bench_jit 25 --repeats 1
micro_bench bench_ragged_attention 20
micro_bench bench_device_topk 12
micro_bench bench_device_kv 12
micro_bench bench_codebook_build 12 16384 128 0.95 2  # SpindleKV's graph at 16K vectors: host vs device
# The CPU suite on the CUDA build (CI runs it without CUDA): only with time to spare.
if (( bench_only_build )); then
  record "ctest (the rest)" note 0 "not run: this call built the bench targets only"
elif (( ! quick && $(left) > 90 )); then
  step "ctest (the rest, -j $jobs)" "$out/ctest.log" \
    timeout -k 10 $(( $(left) - 20 )) ctest --test-dir "$build" -j "$jobs" -E 'Gpu|Cuda|OnTheDevice|DeviceKv' --timeout 300
fi
fi  # stage != tests

# ---- 4. summary ----------------------------------------------------------------------------------
echo
echo "================ kvevict device check: $(timeout 20 nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n1) ================"
printf '%-44s %-6s %6s  %s\n' STEP STATUS SECONDS NOTE
while IFS=$'\t' read -r name status seconds note; do
  printf '%-44s %-6s %6s  %s\n' "$name" "$status" "$seconds" "$note"
done < "$summary"
if [[ -f "$out/bench_jit.log" ]]; then
  echo
  echo "---- bench_jit figures ----"
  grep -E "ms|GB/s|skipped" "$out/bench_jit.log"
fi
for log in "$out"/kvevict_*_tests.*.log; do
  [[ -f "$log" ]] || continue
  grep -h "max relative error" "$log" | sed 's/^/  /'
done
if [[ -f "$out/bench_gpu_agreement.log" ]]; then
  echo
  echo "---- bench_gpu_agreement figures ----"
  cat "$out/bench_gpu_agreement.log"
fi
if [[ -f "$out/bench_gpu_decode.log" ]]; then
  echo
  echo "---- bench_gpu_decode figures ----"
  grep -vE "^(bench_gpu_decode:|model loaded)" "$out/bench_gpu_decode.log"
fi
publish  # summary.json (the steps, the verdict, the benchmarks' JSON) and the rest, once more
echo "logs: $out${OUT:+; in \$OUT: verdict.txt, summary.tsv, summary.json, benchmark JSON, logs.tar.gz}"
(( failures == 0 && not_started == 0 ))
