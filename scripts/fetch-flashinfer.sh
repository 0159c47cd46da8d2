#!/usr/bin/env bash
# Obtains FlashInfer's header-only CUDA library for the optional FlashInfer prefill attention
# (core/decode/cuda/flashinfer/, docs/CUDA.md "FlashInfer prefill"), outside the repository:
#   - the PyPI wheel flashinfer-python==0.7.2.post1 (Apache-2.0): its flashinfer/data/include;
#   - the PyPI wheel nvidia-cuda-cccl==13.3.5.0.6: FlashInfer 0.7.2 uses cuda::fast_mod_div, which
#     the CCCL of CUDA 13.0 lacks, so a newer CCCL (header-only, same major version) comes with it.
# Layout: $KVEVICT_FLASHINFER_DIR (default ~/.cache/kvevict/flashinfer)/0.7.2.post1/{include,cccl}.
# Prints that folder: pass it to CMake as -DKVEVICT_FLASHINFER_DIR=... Nothing is installed.
#
# Usage: scripts/fetch-flashinfer.sh [--pack FILE]
#   --pack FILE: also write what kvevict's glue can include as one .tar.gz (1.6 MB) for a machine
#                without network (scripts/device-fetch-debs.sh carries it to the accelerator
#                machine): FlashInfer's top-level headers and attention/, and CCCL's cuda/ and nv/
#                (its thrust/ and cub/, and FlashInfer's GEMM, MoE and communication headers, are
#                not reached from the prefill; nvcc -M lists the closure).
set -euo pipefail

version="0.7.2.post1"
cccl_version="13.3.5.0.6"
dir="${KVEVICT_FLASHINFER_DIR:-$HOME/.cache/kvevict/flashinfer}"
home="$dir/$version"
pack=""
if [[ "${1:-}" == "--pack" ]]; then
  pack="${2:?--pack needs a file}"
fi

# Extracts the members of wheel $1 under prefix $2 into folder $3 (the prefix removed).
extract() {
  python3 - "$1" "$2" "$3" <<'PY'
import os, sys, zipfile
wheel, prefix, out = sys.argv[1], sys.argv[2], sys.argv[3]
with zipfile.ZipFile(wheel) as z:
    names = [n for n in z.namelist() if n.startswith(prefix) and not n.endswith("/")]
    if not names:
        sys.exit(f"fetch-flashinfer: {wheel} holds no {prefix}")
    for n in names:
        target = os.path.join(out, n[len(prefix):])
        os.makedirs(os.path.dirname(target), exist_ok=True)
        with z.open(n) as src, open(target, "wb") as dst:
            dst.write(src.read())
PY
}

# Downloads wheel $1==$2 (no dependencies) into $dir/wheels unless it is there; prints its path.
wheel() {
  local wheels="$dir/wheels" file
  mkdir -p "$wheels"
  if ! ls "$wheels"/"$1"-"$2"-*.whl > /dev/null 2>&1; then
    echo "fetch-flashinfer: downloading ${1//_/-}==$2" >&2
    # Few retries and a short timeout: without network the build goes on without FlashInfer soon.
    python3 -m pip download --quiet --retries 1 --timeout 15 --no-deps --only-binary :all: \
      "${1//_/-}==$2" -d "$wheels" >&2 || return 1
  fi
  file="$(ls "$wheels"/"$1"-"$2"-*.whl 2>/dev/null | head -n 1)"
  [[ -n "$file" ]] || return 1
  echo "$file"
}

if [[ ! -f "$home/include/flashinfer/attention/prefill.cuh" || ! -f "$home/cccl/cuda/cmath" ]]; then
  mkdir -p "$dir"
  tmp="$(mktemp -d "$dir/extract.XXXXXX")"
  trap 'rm -rf "$tmp"' EXIT
  # (A failed download inside $(...) would not stop the script: each path is checked first.)
  flashinfer_wheel="$(wheel flashinfer_python "$version")" || { echo "fetch-flashinfer: flashinfer-python==$version not downloaded" >&2; exit 1; }
  cccl_wheel="$(wheel nvidia_cuda_cccl "$cccl_version")" || { echo "fetch-flashinfer: nvidia-cuda-cccl==$cccl_version not downloaded" >&2; exit 1; }
  extract "$flashinfer_wheel" "flashinfer/data/include/" "$tmp/include"
  extract "$cccl_wheel" "nvidia/cu13/include/cccl/" "$tmp/cccl"
  grep -q "fast_mod_div" -r "$tmp/cccl/cuda" || { echo "fetch-flashinfer: the CCCL wheel lacks cuda::fast_mod_div" >&2; exit 1; }
  mkdir -p "$home"
  rm -rf "$home/include" "$home/cccl"
  mv "$tmp/include" "$home/include"
  mv "$tmp/cccl" "$home/cccl"
fi
if [[ -n "$pack" ]]; then
  (cd "$home" && tar czf "$pack" include/flashinfer/*.cuh include/flashinfer/*.h include/flashinfer/attention cccl/cuda cccl/nv)
  echo "fetch-flashinfer: packed $(du -h "$pack" | cut -f1) into $pack" >&2
fi
echo "$home"
