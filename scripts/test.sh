#!/usr/bin/env bash
# The README's second command: install what is missing, build, and run every test: every fuzz
# target (scripts/fuzz.sh, 30 s each, ASan/UBSan), the whole CTest suite in the sanitizer
# configuration (scripts/sanitize.sh: ASan + UBSan + _GLIBCXX_ASSERTIONS in build-asan; the CLI
# tests and the eval smoke config included), then the Release CTest suite (unit, CLI and end-to-end
# tests; GPU tests skip with a reason when no GPU is present), whose summary ends the output.
# KVEVICT_SKIP_SANITIZE=1 leaves the sanitizer run out (a quick local check; CI always runs it).
set -euo pipefail
cd "$(dirname "$0")/.."
# Idle OpenMP threads sleep instead of spinning: on a small or shared machine spinning threads
# steal the cores the working threads need.
export OMP_WAIT_POLICY="${OMP_WAIT_POLICY:-PASSIVE}"
bash scripts/setup.sh
bash scripts/build.sh
bash scripts/slurm/ci-cluster.sh  # sharded eval on a one-node SLURM cluster, merged vs unsharded (root; KVEVICT_SKIP_SLURM=1 skips)
bash scripts/fuzz.sh
if [[ "${KVEVICT_SKIP_SANITIZE:-0}" != 1 ]]; then
  bash scripts/sanitize.sh
fi
cd build
ctest --output-on-failure -j "$(nproc)" --timeout 1200
