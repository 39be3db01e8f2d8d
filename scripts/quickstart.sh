#!/usr/bin/env bash
# Sets everything up and runs the main job on the built-in default: plan the seed model
# (zoo:Net, 4 x Linear(2000, 2000)) under DDP on 2 ranks and simulate three training steps on one
# H100 node (SimGrid), printing step times, overlap, collectives and link load, and draw the run's
# timeline to build/quickstart.png with the viewer.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
bash scripts/build.sh >/dev/null
./build/stratsim simulate --model zoo:Net --plan builtin:ddp --platform h100 --timeline build/quickstart.timeline.json "$@"
# The same run drawn by the viewer, with no display needed; open it with
#   ./build/stratsim-view build/quickstart.timeline.json
if [ -x build/stratsim-view ]; then
  ./build/stratsim-view --render build/quickstart.png build/quickstart.timeline.json
  echo "timeline drawn to build/quickstart.png; open it with ./build/stratsim-view build/quickstart.timeline.json"
fi
