#!/usr/bin/env bash
# Downloads (never installs) the Debian packages kvevict needs to build on an accelerator machine
# that has the CUDA toolkit, CMake and Python but no package registry. Run it here, on a Debian 12
# machine with apt; scripts/device-check.sh unpacks the files there with `dpkg -x` into a private
# prefix. The folder is git-ignored, so it travels only when named explicitly (carry).
#
# Usage: scripts/device-fetch-debs.sh [DIR]      (default: .device-debs in the repository root)
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
# The packages are built for this machine's architecture; the accelerator machine must match.
echo "device-fetch-debs: architecture $(dpkg --print-architecture); carry '$(realpath --relative-to="$root" "$dir")' to the device"
