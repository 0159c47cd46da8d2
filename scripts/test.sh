#!/usr/bin/env bash
# The README's second command: install what is missing, build, and run every test.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh
cd build
ctest --output-on-failure -j "$(nproc)" --timeout 1200
