#!/usr/bin/env bash
# Configures and builds kvevict in ./build (Release). Extra arguments go to CMake's configure step.
# With the CUDA toolkit present, FlashInfer's headers (the optional tensor-core prefill attention:
# docs/CUDA.md "FlashInfer prefill") are fetched into ~/.cache/kvevict/flashinfer, never the
# repository, by scripts/fetch-flashinfer.sh; without network (or with KVEVICT_NO_FLASHINFER=1, or
# a -DKVEVICT_FLASHINFER_DIR=... of your own) the build goes on as it is, without or with yours.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/compiler-cache.sh
flashinfer=()
cuda_toolkit() { command -v nvcc > /dev/null 2>&1 || [[ -x /usr/local/cuda/bin/nvcc ]]; }
if [[ "${KVEVICT_NO_FLASHINFER:-0}" != 1 && " $* " != *KVEVICT_FLASHINFER_DIR* && " $* " != *"KVEVICT_CUDA=OFF"* ]] &&
   cuda_toolkit; then
  if dir="$(bash scripts/fetch-flashinfer.sh)"; then
    flashinfer=(-DKVEVICT_FLASHINFER_DIR="$dir")
  else
    echo "build: FlashInfer's headers could not be fetched; building without the FlashInfer prefill" >&2
  fi
fi
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release "${KVEVICT_LAUNCHER[@]}" "${flashinfer[@]}" "$@" >/dev/null
cmake --build build -j "$(nproc)"
