#!/usr/bin/env bash
# Configures and builds kvevict in ./build (Release). Extra arguments go to CMake's configure step.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/compiler-cache.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release "${KVEVICT_LAUNCHER[@]}" "$@" >/dev/null
cmake --build build -j "$(nproc)"
