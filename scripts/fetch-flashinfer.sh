#!/usr/bin/env bash
# Obtains FlashInfer's C++/CUDA headers, for reading and comparison only: downloads the PyPI wheel
# flashinfer-python==0.7.2.post1 (pip download --no-deps) into $KVEVICT_FLASHINFER_DIR (default
# ~/.cache/kvevict/flashinfer), extracts its flashinfer/data/include there and prints that include
# path. Nothing in kvevict's build uses it; the ragged attention kernels are our own
# (core/decode/ragged_attention_tiles.h). Never inside the repository.
set -euo pipefail

version="0.7.2.post1"
dir="${KVEVICT_FLASHINFER_DIR:-$HOME/.cache/kvevict/flashinfer}"
include="$dir/$version/include"

if [ -d "$include/flashinfer" ]; then
  echo "$include"
  exit 0
fi
mkdir -p "$dir"
wheels="$dir/wheels"
if ! ls "$wheels"/flashinfer_python-"$version"-*.whl > /dev/null 2>&1; then
  echo "fetch-flashinfer: downloading flashinfer-python==$version" >&2
  python3 -m pip download --quiet --no-deps --only-binary :all: "flashinfer-python==$version" -d "$wheels" >&2
fi
wheel="$(ls "$wheels"/flashinfer_python-"$version"-*.whl | head -n 1)"
tmp="$(mktemp -d "$dir/extract.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
# A wheel is a zip; take only the headers.
python3 - "$wheel" "$tmp" <<'PY'
import sys, zipfile
wheel, out = sys.argv[1], sys.argv[2]
with zipfile.ZipFile(wheel) as z:
    names = [n for n in z.namelist() if n.startswith("flashinfer/data/include/") and not n.endswith("/")]
    if not names:
        sys.exit(f"fetch-flashinfer: {wheel} holds no flashinfer/data/include")
    for n in names:
        z.extract(n, out)
PY
mkdir -p "$dir/$version"
rm -rf "$include"
mv "$tmp/flashinfer/data/include" "$include"
echo "$include"
