#!/usr/bin/env bash
# Sets everything up and runs the main job on the built-in default: plan the seed model
# (zoo:Net, 4 x Linear(2000, 2000)) under DDP on 2 ranks and simulate three training steps on one
# H100 node (SimGrid), printing step times, overlap, collectives and link load.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
bash scripts/build.sh >/dev/null
exec ./build/stratsim simulate --model zoo:Net --plan builtin:ddp --platform h100 "$@"
