#!/usr/bin/env bash
# Configures and builds kvevict in ./build (Release). Extra arguments go to CMake's configure step.
# FlashInfer's headers (the optional tensor-core prefill attention: docs/CUDA.md "FlashInfer
# prefill") are fetched into ~/.cache/kvevict/flashinfer, never the repository, by
# scripts/fetch-flashinfer.sh when they can be built here: a CUDA toolkit of release 13 or later
# (the CCCL that comes with them is CUDA 13's) and CUDA architectures of 80 or more (the default
# 80;90, or those given or cached). Otherwise, when the fetch fails (no network) or with
# KVEVICT_NO_FLASHINFER=1, the build goes on without them. A -DKVEVICT_FLASHINFER_DIR=... of your
# own is used as given (pass it on every run: this script otherwise sets the cached value).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/compiler-cache.sh

# The CUDA toolkit's release (major), or 0 without one.
cuda_release() {
  local nvcc
  nvcc="$(command -v nvcc || true)"
  [[ -z "$nvcc" && -x /usr/local/cuda/bin/nvcc ]] && nvcc=/usr/local/cuda/bin/nvcc
  [[ -n "$nvcc" ]] || { echo 0; return; }
  "$nvcc" --version 2>/dev/null | sed -n 's/.*release \([0-9]*\)\..*/\1/p' | head -n 1 | grep . || echo 0
}
# The CUDA architectures CMake will use: from the arguments, else the cached build, else "" (the
# project's default, 80;90).
cuda_architectures() {
  local a
  for a in "$@"; do
    [[ "$a" == -DCMAKE_CUDA_ARCHITECTURES=* || "$a" == -DCMAKE_CUDA_ARCHITECTURES:*=* ]] && { echo "${a#*=}"; return; }
  done
  [[ -f build/CMakeCache.txt ]] && sed -n 's/^CMAKE_CUDA_ARCHITECTURES:[A-Z]*=//p' build/CMakeCache.txt | head -n 1
}
# Whether FlashInfer can be built with these arguments (see the header).
flashinfer_wanted() {
  [[ "${KVEVICT_NO_FLASHINFER:-0}" != 1 ]] || return 1
  local a arch
  for a in "$@"; do
    [[ "$a" =~ ^-DKVEVICT_CUDA(:BOOL)?=(OFF|off|Off|0|FALSE|false|NO|no)$ ]] && return 1
  done
  (( $(cuda_release) >= 13 )) || return 1
  local archs
  archs="$(cuda_architectures "$@")"
  for arch in ${archs//;/ }; do
    [[ "$arch" =~ ^([0-9]+) ]] && (( BASH_REMATCH[1] >= 80 )) || return 1
  done
  return 0
}

flashinfer=()
if [[ " $* " != *KVEVICT_FLASHINFER_DIR* ]]; then
  flashinfer=(-DKVEVICT_FLASHINFER_DIR=)  # without, unless fetched below
  if flashinfer_wanted "$@"; then
    if dir="$(bash scripts/fetch-flashinfer.sh)" && [[ -n "$dir" ]]; then
      flashinfer=(-DKVEVICT_FLASHINFER_DIR="$dir")
    else
      echo "build: FlashInfer's headers could not be fetched; building without the FlashInfer prefill" >&2
    fi
  fi
fi
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release "${KVEVICT_LAUNCHER[@]}" "${flashinfer[@]}" "$@" >/dev/null
cmake --build build -j "$(nproc)"
