#!/usr/bin/env bash
# Downloads (never installs) the Debian packages kvevict needs to build on an accelerator machine
# that has the CUDA toolkit, CMake and Python but no package registry. Run it here, on a Debian 12
# machine with apt; scripts/device-check.sh unpacks the files there with `dpkg -x` into a private
# prefix. The folder is git-ignored, so it travels only when named explicitly (carry).
#
# It also prepares .device-shared/ (git-ignored, carried too): the test models the GPU tests and
# bench_gpu_agreement read there, since ../shared and ~/.cache do not travel: stories260K, and
# SmolLM2-135M cut to its first blocks (scripts/gguf_keep_layers.py), because the whole file (94 MB)
# exceeds the 64 MiB that travel. And .device-flashinfer/ (git-ignored, carried): FlashInfer's
# headers with their CCCL, packed by scripts/fetch-flashinfer.sh --pack (the device has no network).
#
# Usage: scripts/device-fetch-debs.sh [DIR]      (default: .device-debs in the repository root)
#   KVEVICT_DEVICE_SMOLLM2_LAYERS: blocks of SmolLM2 to keep (default 3: 37 MiB; 4 no longer fits
#   beside FlashInfer's headers)
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
dir="${1:-$root/.device-debs}"
# Budget: the accelerator machine receives at most 64 MiB with the working tree.
limit_mib=48

# Build dependencies (headers, CMake configs, static or shared libraries) and the run-time
# libraries they need that a CUDA machine may lack. OpenBLAS comes in its pthread flavour.
packages=(
  libyaml-cpp-dev libyaml-cpp0.7
  libcli11-dev
  nlohmann-json3-dev
  libsqlite3-dev libsqlite3-0
  libgtest-dev libgmock-dev googletest
  libopenblas-dev libopenblas-pthread-dev libopenblas0-pthread libopenblas0
  libgfortran5 libquadmath0
  libgomp1
  ninja-build
)

command -v apt-get >/dev/null || { echo "device-fetch-debs: apt-get is required (run this on Debian 12)" >&2; exit 1; }
mkdir -p "$dir"
cd "$dir"
rm -f ./*.deb
echo "device-fetch-debs: downloading ${#packages[@]} packages into $dir"
apt-get download "${packages[@]}"

total_kib=$(du -sk . | cut -f1)
echo "device-fetch-debs: $(ls ./*.deb | wc -l) files, $((total_kib / 1024)) MiB:"
ls -1 ./*.deb | sed 's/^/  /'
if (( total_kib > limit_mib * 1024 )); then
  echo "device-fetch-debs: more than ${limit_mib} MiB; the working tree and the packages must fit in 64 MiB" >&2
  exit 1
fi
# ---- the models (.device-shared/models, laid out as ../shared/models is) -----------------------------
shared="$root/.device-shared/models"
mkdir -p "$shared"
stories="$root/../shared/models/stories260K"
if [[ -d "$stories" ]]; then
  rm -rf "$shared/stories260K" && cp -r "$stories" "$shared/stories260K"
else
  echo "device-fetch-debs: $stories not found; the stories260K GPU tests will skip there" >&2
fi
smollm2="${KVEVICT_MODEL_DIR:-$HOME/.cache/kvevict/models}/SmolLM2-135M-Instruct.Q4_1.gguf"
layers="${KVEVICT_DEVICE_SMOLLM2_LAYERS:-3}"
rm -f "$shared"/smollm2-135m-first*.gguf
if [[ -f "$smollm2" ]]; then
  python3 "$root/scripts/gguf_keep_layers.py" "$smollm2" "$shared/smollm2-135m-first$layers.gguf" --layers "$layers"
else
  echo "device-fetch-debs: $smollm2 not found (scripts/setup.sh fetches it); bench_gpu_agreement will skip there" >&2
fi
# ---- FlashInfer's headers (.device-flashinfer, 1.6 MiB): device-check.sh builds its prefill with them --
flashinfer="$root/.device-flashinfer"
mkdir -p "$flashinfer"
rm -f "$flashinfer/flashinfer.tar.gz"
if ! bash "$root/scripts/fetch-flashinfer.sh" --pack "$flashinfer/flashinfer.tar.gz" > /dev/null; then
  echo "device-fetch-debs: FlashInfer's headers could not be fetched; the device check builds without them" >&2
fi
# What travels: the tracked and untracked-not-ignored files, plus the three carried folders.
tree_kib=$(cd "$root" && git ls-files -z --cached --others --exclude-standard | xargs -0 du -ck 2>/dev/null | tail -n1 | cut -f1)
shared_kib=$(du -sk "$root/.device-shared" | cut -f1)
flashinfer_kib=$(du -sk "$flashinfer" | cut -f1)
all_mib=$(( (tree_kib + total_kib + shared_kib + flashinfer_kib) / 1024 ))
echo "device-fetch-debs: working tree + .device-debs + .device-shared + .device-flashinfer = $all_mib MiB (the limit is 64)"
if (( all_mib > 62 )); then
  echo "device-fetch-debs: too much to travel; lower KVEVICT_DEVICE_SMOLLM2_LAYERS" >&2
  exit 1
fi
# The packages are built for this machine's architecture; the accelerator machine must match.
echo "device-fetch-debs: architecture $(dpkg --print-architecture); carry '$(realpath --relative-to="$root" "$dir")', '.device-shared' and '.device-flashinfer' to the device"
