#!/usr/bin/env bash
# The README's first command: install what is missing, build, and run the main job.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh
model="${KVEVICT_MODEL_DIR:-$HOME/.cache/kvevict/models}/SmolLM2-135M-Instruct.Q4_1.gguf"
./build/kvevict generate -m "$model" --chat -p "What is the capital of France?" -n 48
