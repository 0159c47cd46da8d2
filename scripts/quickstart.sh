#!/usr/bin/env bash
# The README's first command: install what is missing, build, and run the main job — the built-in
# policies on SmolLM2 (passkey and needle, two lengths, three budgets) into kvevict.db, then the
# leaderboard (eval prints it). A finished identical run is skipped; an interrupted one continues (--resume).
set -euo pipefail
cd "$(dirname "$0")/.."
export OMP_WAIT_POLICY="${OMP_WAIT_POLICY:-PASSIVE}"  # see scripts/test.sh
bash scripts/setup.sh
bash scripts/build.sh
./build/kvevict eval -c configs/quickstart.yaml --db kvevict.db --resume
